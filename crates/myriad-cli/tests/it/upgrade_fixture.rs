//! A data directory written by an earlier release opens in this one (issue 48): the
//! fixture (`scripts/make-upgrade-fixture.sh`) holds the data directories of three
//! servers of protocol 29's binary, made with `--init` and `--join` on
//! 127.0.0.29-31:7401 and given a tree of files by that release's own client, and the
//! tree as written. This build starts a server on each directory at its address, and
//! every file comes back as the old release stored it, with its attributes, links and
//! changes; then the cluster takes new writes. A change of the storage format that
//! forgets a migration fails here, in every CI run, without building the old release.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use myriad_client::{Caller, Client, ClientConfig, FsError};

use crate::harness::BIN;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/protocol29.tar.gz"
);

/// The servers started on the fixture, killed when dropped.
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ok<T>(r: Result<T, FsError>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

#[test]
fn the_previous_releases_data_directories_open_and_keep_every_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new("tar")
        .args(["-xzf", FIXTURE, "-C"])
        .arg(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("tar: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut servers = Servers(Vec::new());
    for k in 1..=3u32 {
        let home = dir.path().join(format!("s{k}"));
        let log = std::fs::File::create(home.join("server.log")).unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(BIN)
            .arg("server")
            .arg("--data-dir")
            .arg(home.join("data"))
            .args(["--listen", &format!("127.0.0.{}:7401", 28 + k)])
            // As they were started: the joining ones named the first one's secret.
            .arg("--secret-file")
            .arg(dir.path().join("s1/data/cluster.secret"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap_or_else(|e| panic!("{e}")))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        servers.0.push(child);
    }
    let logs = || {
        (1..=3)
            .map(|k| {
                let text = std::fs::read_to_string(dir.path().join(format!("s{k}/server.log")))
                    .unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "---- server {k}:\n{}",
                    lines[lines.len().saturating_sub(20)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let keys = myriad_client::setup::load_keys(&dir.path().join("s1/data/client.key"))
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let map = loop {
        match myriad_client::setup::load_cluster(
            Path::new("127.0.0.29:7401,127.0.0.30:7401,127.0.0.31:7401"),
            &keys,
            Duration::from_secs(2),
        ) {
            Ok(m) => break m,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for the servers: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{e}\n{}", logs()),
        }
    };
    assert_eq!(map.nodes.len(), 3, "the old cluster's three servers");
    let mut cfg = ClientConfig::new(map, Caller::root(), keys);
    cfg.request_timeout = Duration::from_secs(30);
    let c = Client::new(cfg).unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let tree = dir.path().join("tree");
    let read = |p: &str| std::fs::read(tree.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    rt.block_on(async {
        // Every file as written, but for the changes made after (`mv`, `rm`).
        for i in (1..=40).filter(|i| ![4, 5].contains(i)) {
            let p = format!("/fixture/docs/f{i}.txt");
            let (_, data) = ok(c.fetch(&p).await, &p);
            assert_eq!(data, read(&format!("docs/f{i}.txt")), "{p}");
        }
        let (_, moved) = ok(c.fetch("/fixture/moved.txt").await, "moved");
        assert_eq!(moved, read("docs/f4.txt"));
        assert_eq!(
            c.stat("/fixture/docs/f4.txt").await.err(),
            Some(FsError::NotFound)
        );
        assert_eq!(
            c.stat("/fixture/docs/f5.txt").await.err(),
            Some(FsError::NotFound)
        );
        let (big, data) = ok(c.fetch("/fixture/big.bin").await, "big");
        assert_eq!(big.size, 5_000_000);
        assert!(data == read("big.bin"), "big.bin differs");
        let (_, leaf) = ok(c.fetch("/fixture/docs/deep/er/still/leaf").await, "leaf");
        assert_eq!(leaf, read("docs/deep/er/still/leaf"));
        // Attributes and links.
        let deep = ok(c.stat("/fixture/docs/deep").await, "deep");
        assert_eq!(deep.mode & 0o7777, 0o700);
        let owned = ok(c.stat("/fixture/docs/f1.txt").await, "f1");
        assert_eq!((owned.uid, owned.gid), (1000, 1000));
        assert_eq!(ok(c.readlink("/fixture/link").await, "link"), "docs/f2.txt");
        let (hard, data) = ok(c.fetch("/fixture/hard").await, "hard");
        assert_eq!(data, read("docs/f3.txt"));
        assert_eq!(hard.nlink, 2);
        let empty = ok(c.stat("/fixture/empty").await, "empty");
        assert_eq!(empty.kind, myriad_client::FileKind::Directory);
        // The cluster goes on: a new write, read back.
        ok(
            c.write_file("/fixture/after-upgrade", 0o644, b"written by this build")
                .await,
            "write",
        );
        let (_, data) = ok(c.fetch("/fixture/after-upgrade").await, "read back");
        assert_eq!(data, b"written by this build");
    });
    drop(servers);
}
