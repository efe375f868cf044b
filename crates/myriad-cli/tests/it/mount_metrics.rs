//! The mount's own metrics (`myriad mount --metrics ADDR`, docs/metrics.md): kernel
//! requests counted by kind, and every getattr counted once by where it was answered.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;

use crate::harness::TestCluster;
use crate::mount::Mount;

pub fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// The value of the sample `name{labels}` in a scrape (0 if absent).
pub fn value(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A mount of `tc` with the `myriad mount` flags `flags`, serving its metrics, and their
/// address.
pub fn mount_with_metrics(tc: &TestCluster, flags: &[&str]) -> (Mount, String) {
    mount_with_metrics_and_env(tc, flags, &[])
}

/// `mount_with_metrics` whose process gets `env` too (e.g. `MYRIAD_LOG`).
pub fn mount_with_metrics_and_env(
    tc: &TestCluster,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (Mount, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{port}");
    let mut extra = vec!["--", "--metrics", &addr];
    extra.extend_from_slice(flags);
    (Mount::with_env(tc, &extra, env), addr)
}

#[test]
fn a_mount_counts_kernel_requests_and_where_getattr_was_answered() {
    let tc = TestCluster::start(3);
    let (m, addr) = mount_with_metrics(&tc, &[]);
    let root = m.dir.path();
    std::fs::create_dir(root.join("d")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..10 {
        std::fs::write(root.join(format!("d/f{i}")), b"hello").unwrap_or_else(|e| panic!("{e}"));
    }
    for i in 0..10 {
        let md = std::fs::metadata(root.join(format!("d/f{i}"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(md.size(), 5);
        assert_eq!(
            std::fs::read(root.join(format!("d/f{i}"))).ok().as_deref(),
            Some(&b"hello"[..])
        );
    }
    assert_eq!(
        std::fs::read_dir(root.join("d")).map(Iterator::count).ok(),
        Some(10)
    );
    let text = scrape(&addr);
    let k = |op: &str| {
        value(
            &text,
            &format!("myriad_mount_kernel_requests_total{{op=\"{op}\"}}"),
        )
    };
    assert!(k("create") >= 10, "{text}");
    assert!(k("mkdir") >= 1 && k("lookup") >= 1, "{text}");
    assert!(k("read") >= 10 && k("write") >= 10, "{text}");
    assert!(k("readdir") + k("readdirplus") >= 1, "{text}");
    let from = |src: &str| {
        value(
            &text,
            &format!("myriad_mount_getattr_answers_total{{source=\"{src}\"}}"),
        )
    };
    // Every getattr is answered from exactly one place.
    assert_eq!(
        from("lease") + from("cache") + from("server"),
        k("getattr"),
        "{text}"
    );
    assert!(text.contains("myriad_mount_lookups_answered_locally_total{source=\"lease\"}"));
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
}

/// Symlink targets are kept by the kernel (`FUSE_CACHE_SYMLINKS`, issue 51 item 3): 200
/// readlinks and 200 path walks through a symlink reach the mount about once; a symlink
/// replaced from another mount is seen at once (it is a new inode, which the kernel asks
/// again), and so is one removed.
#[test]
fn symlink_targets_are_read_once_and_a_replaced_one_is_seen() {
    let tc = TestCluster::start(3);
    let (a, addr) = mount_with_metrics(&tc, &[]);
    let b = Mount::new(&tc, &[]);
    let io = |r: std::io::Result<()>| r.unwrap_or_else(|e| panic!("{e}"));
    io(std::fs::create_dir(a.path("d")));
    io(std::fs::write(a.path("d/f"), b"data"));
    io(std::os::unix::fs::symlink("d", a.path("l")));
    let target = |m: &Mount| {
        std::fs::read_link(m.path("l"))
            .unwrap_or_else(|e| panic!("{e}"))
            .to_string_lossy()
            .into_owned()
    };
    for _ in 0..200 {
        assert_eq!(target(&a), "d");
        assert_eq!(
            std::fs::read(a.path("l/f")).ok().as_deref(),
            Some(&b"data"[..])
        );
    }
    let readlinks = || {
        value(
            &scrape(&addr),
            "myriad_mount_kernel_requests_total{op=\"readlink\"}",
        )
    };
    let sent = readlinks();
    assert!(
        (1..=4).contains(&sent),
        "400 uses of one symlink sent {sent} readlinks to the mount"
    );
    // Replaced from another mount: a new symlink, seen at once.
    io(std::fs::create_dir(b.path("e")));
    io(std::fs::remove_file(b.path("l")));
    io(std::os::unix::fs::symlink("e", b.path("l")));
    assert_eq!(target(&a), "e", "a replaced symlink is seen at once");
    assert!(
        std::fs::read(a.path("l/f")).is_err(),
        "the walk follows the new target"
    );
    io(std::fs::remove_file(b.path("l")));
    assert!(
        std::fs::symlink_metadata(a.path("l")).is_err(),
        "a removed symlink is gone at once"
    );
}

/// `rm -rf` makes the kernel ask a directory's attributes before each unlink in it (every
/// change drops them); under a lease they are answered on the FUSE thread, not by a task
/// that asks the client (`Mount::attr_at_hand`): no getattr of the run is counted
/// "server". A directory another mount then changes is seen changed at once.
#[test]
fn a_held_directory_s_attributes_are_answered_at_hand_between_unlinks() {
    let tc = TestCluster::start(3);
    let (a, addr) = mount_with_metrics(&tc, &[]);
    let b = Mount::new(&tc, &[]);
    let io = |r: std::io::Result<()>| r.unwrap_or_else(|e| panic!("{e}"));
    io(std::fs::create_dir(a.path("d")));
    std::thread::sleep(std::time::Duration::from_millis(2200));
    for i in 0..30 {
        io(std::fs::write(a.path(&format!("d/f{i}")), b"x"));
    }
    let from_server = || {
        value(
            &scrape(&addr),
            "myriad_mount_getattr_answers_total{source=\"server\"}",
        )
    };
    let before = from_server();
    let status = std::process::Command::new("rm")
        .args(["-rf"])
        .arg(a.path("d"))
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    assert!(!a.path("d").exists());
    let asked = from_server() - before;
    assert!(
        asked <= 2,
        "{asked} getattrs went to a task during rm -rf of 30 files"
    );
    io(std::fs::create_dir(b.path("d")));
    let md = std::fs::metadata(a.path("d")).unwrap_or_else(|e| panic!("{e}"));
    assert!(md.is_dir(), "made again by the other mount, seen here");
}

/// `du` of a tree listed before opens each directory with no task and lists no page
/// (`Mount::opendir_at_hand`: held whole under a lease, its listing kept by the kernel),
/// and names looked up again are answered with no task either (`Mount::lookup_at_hand`);
/// a name another mount adds is still listed at the next open here.
#[test]
fn a_held_tree_is_opened_and_looked_up_at_hand_and_another_mount_s_change_is_seen() {
    let tc = TestCluster::start(3);
    let (a, addr) = mount_with_metrics(&tc, &[]);
    let b = Mount::new(&tc, &[]);
    let io = |r: std::io::Result<()>| r.unwrap_or_else(|e| panic!("{e}"));
    for s in 0..5 {
        io(std::fs::create_dir_all(a.path(&format!("d/s{s}"))));
        for f in 0..3 {
            io(std::fs::write(a.path(&format!("d/s{s}/f{f}")), b"x"));
        }
    }
    let du = || {
        let out = std::process::Command::new("du")
            .args(["-s", "--apparent-size", "-b"])
            .arg(a.path("d"))
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = du();
    let at_hand = || {
        value(
            &scrape(&addr),
            "myriad_mount_answered_at_hand_total{op=\"opendir\"}",
        )
    };
    let before = at_hand();
    for _ in 0..3 {
        assert_eq!(du(), listed, "the same tree");
    }
    let opened = at_hand() - before;
    assert!(
        opened >= 9,
        "{opened} of 18 directory opens of three du runs answered at hand"
    );
    // Names the kernel let go of are looked up again, answered from the lease the same
    // way (`Mount::lookup_at_hand`).
    let looked_up = || {
        value(
            &scrape(&addr),
            "myriad_mount_answered_at_hand_total{op=\"lookup\"}",
        )
    };
    if std::fs::write("/proc/sys/vm/drop_caches", "2").is_ok() {
        let before = looked_up();
        for s in 0..5 {
            for f in 0..3 {
                let md = std::fs::metadata(a.path(&format!("d/s{s}/f{f}")));
                assert_eq!(md.map(|m| m.len()).ok(), Some(1));
            }
        }
        let answered = looked_up() - before;
        assert!(answered >= 10, "{answered} of 20 lookups answered at hand");
    }
    io(std::fs::write(b.path("d/s0/new"), b"y"));
    let names: Vec<String> = std::fs::read_dir(a.path("d/s0"))
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|e| {
            e.map(|e| e.file_name().to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .collect();
    assert!(names.contains(&"new".to_string()), "{names:?}");
    assert_eq!(names.len(), 4, "{names:?}");
}
