//! Directory quotas through real server processes (docs/quotas.md, step 1): set on a tree
//! that exists (counted from scratch), kept exact as files are made, grown, shrunk,
//! linked, renamed and removed across partitions, nested, cleared, and exact after a
//! kill -9 of a server; refused while a server speaks an older protocol.

use std::time::Duration;

use myriad_client::{Caller, Client, NodeId, RenameFlags};

use crate::harness::TestCluster;

/// What `myriad quota get PATH` prints, as text.
fn get(tc: &TestCluster, path: &str) -> String {
    let out = tc.cli(&["quota", "get", path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits (at most 10 s) until `quota get PATH` prints `want`.
fn wait_get(tc: &TestCluster, path: &str, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = get(tc, path);
        if now.trim_end() == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "wanted\n{want}\ngot\n{now}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn file(c: &Client, path: &str, len: usize) {
    c.create(path, 0o644, true, &vec![7u8; len])
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// (names, bytes of regular files) below `dir`, by a walk. A hard-linked file's bytes
/// count once (docs/quotas.md "Hard links": where its first name was when it was linked,
/// inside `dir` in these tests).
async fn walk(c: &Client, dir: &str) -> (u64, u64) {
    let mut total = (0, 0);
    let mut linked = std::collections::BTreeSet::new();
    let mut todo = vec![dir.to_string()];
    while let Some(d) = todo.pop() {
        for e in c.readdir(&d).await.unwrap_or_else(|e| panic!("{d}: {e}")) {
            let p = format!("{}/{}", d.trim_end_matches('/'), e.name);
            let st = c.stat(&p).await.unwrap_or_else(|e| panic!("{p}: {e}"));
            total.0 += 1;
            match st.kind {
                myriad_client::FileKind::Directory => todo.push(p),
                myriad_client::FileKind::File if st.nlink == 1 || linked.insert(st.ino) => {
                    total.1 += st.size;
                }
                _ => {}
            }
        }
    }
    total
}

#[test]
fn a_quota_s_usage_is_counted_on_an_existing_tree_and_kept_exact_as_it_changes() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let c = tc.client();
    // A tree spread over the partitions, made before the quota.
    rt.block_on(async {
        c.mkdir("/lab", 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        c.mkdir("/other", 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for d in 0..4 {
            let dir = format!("/lab/d{d}");
            c.mkdir(&dir, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
            for f in 0..5 {
                file(&c, &format!("{dir}/f{f}"), 100 * (f + 1)).await;
            }
        }
        c.symlink("d0/f0", "/lab/link")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        file(&c, "/other/outside", 5000).await;
    });
    // 4 directories, 20 files of 100..500 bytes (1,500 per directory), 1 symbolic link.
    let out = tc.cli(&["quota", "set", "/lab", "--files", "1000", "--bytes", "1M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let set = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        set.trim_end(),
        "/lab: files 25 of 1000 (2%), bytes 5.9 KiB of 1.0 MiB (0%)",
        "counted from scratch"
    );
    let exact = |files: u64, bytes: u64| {
        let walked = rt.block_on(walk(&c, "/lab"));
        assert_eq!(walked, (files, bytes), "the test's own count");
        let text = get(&tc, "/lab/d0");
        let line = text
            .lines()
            .find(|l| l.starts_with("/lab:"))
            .unwrap_or_default()
            .to_string();
        assert!(line.contains(&format!("files {files} of 1000")), "{text}");
        line
    };
    exact(25, 6000);

    // Changes: creates (and one into a new directory), a write growing a file, a
    // truncate, an unlink, a rename out of the tree and one into it, a hard link.
    rt.block_on(async {
        c.mkdir("/lab/new", 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        file(&c, "/lab/new/a", 10_000).await;
        let h = c.open("/lab/d1/f0").await.unwrap_or_else(|e| panic!("{e}"));
        c.write(&h, 0, &[1u8; 2000])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let h = c.open("/lab/d2/f4").await.unwrap_or_else(|e| panic!("{e}"));
        c.truncate(&h, 0).await.unwrap_or_else(|e| panic!("{e}"));
        c.unlink("/lab/d3/f4")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        c.rename("/lab/d3/f3", "/other/moved", RenameFlags::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        c.rename("/other/outside", "/lab/d3/came", RenameFlags::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        c.link("/lab/d0/f1", "/lab/d0/f1-again")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    // +1 dir +1 file (10,000 B); f0 100 -> 2,000 B; f4 500 -> 0; -f4 (500); -f3 (400);
    // +came (5,000); a second name of f1 (200 B): both names count, the file's bytes
    // once, in the tree its first name is in (docs/quotas.md "Hard links").
    let bytes = 6000 + 10_000 + 1900 - 500 - 500 - 400 + 5000;
    let line = exact(27, bytes);
    assert!(line.contains("bytes 21.0 KiB"), "{line}");

    // A nested quota: the inner tree's usage, both listed for a path in it.
    let out = tc.cli(&["quota", "set", "/lab/d0", "--files", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inner = "/lab/d0: files 6 of 3 (200%), bytes 1.5 KiB (no limit)";
    let text = get(&tc, "/lab/d0/f2");
    assert!(text.contains(inner), "{text}");
    assert!(
        text.find("/lab:") < text.find("/lab/d0:"),
        "outermost first: {text}"
    );

    // A server killed (its partitions fail over while writes go on) and back: exact.
    tc.kill9(NodeId(2));
    rt.block_on(async {
        for i in 0..10 {
            let p = format!("/lab/d1/after{i}");
            for _ in 0..50 {
                match c.create(&p, 0o644, true, b"0123456789").await {
                    Ok(_) => break,
                    Err(myriad_client::FsError::AlreadyExists) => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    });
    tc.restart(NodeId(2));
    let line = exact(37, bytes + 100);
    assert!(line.contains("bytes 21.1 KiB"), "{line}");

    // Cleared: gone from the list; the nested one stays.
    let out = tc.cli(&["quota", "clear", "/lab"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tc.cli(&["quota", "list"]);
    let list = String::from_utf8_lossy(&out.stdout);
    assert_eq!(list.trim_end(), inner, "{list}");
    wait_get(&tc, "/lab/d1", "/lab/d1: no quota");
}

#[test]
fn a_quota_is_refused_while_a_server_speaks_an_older_protocol() {
    // A server of the protocol before quotas (not merely before this build's: 38 came
    // after 37's quotas), its floor raised to that: refused for what it speaks.
    let before = myriad_placement::map_wire::QUOTAS_SINCE - 1;
    let old = before.to_string();
    let tc = TestCluster::start_with_env(1, &[], &[("MYRIAD_PROTOCOL_NEWEST", old.as_str())]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        let c = tc.client();
        crate::protocol_floor::floor_at(&c, before).await;
        c.mkdir("/lab", 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    let out = tc.cli(&["quota", "set", "/lab", "--files", "10"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "quotas need every server on protocol 37 or later; this cluster's floor is {before}"
        )),
        "{err}"
    );
    let out = tc.cli(&["quota", "list"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "no quotas");
    let out = tc.cli(&["quota", "set", "/nowhere", "--files", "10"]);
    assert!(!out.status.success(), "no such directory");
}

/// Writers at once, one per (directory, first number) of `dirs`, each filling until
/// refused: how many they made in all; each refusal must be `QuotaExceeded`.
fn fill_at_once(
    tc: &TestCluster,
    rt: &tokio::runtime::Runtime,
    dirs: Vec<(String, usize)>,
) -> usize {
    let results = rt.block_on(async {
        let writers: Vec<_> = dirs
            .into_iter()
            .map(|(dir, from)| tokio::spawn(fill(tc.client(), dir, from)))
            .collect();
        let mut out = Vec::new();
        for w in writers {
            out.push(w.await.unwrap_or_else(|e| panic!("{e}")));
        }
        out
    });
    for (_, e) in &results {
        assert_eq!(
            e,
            &Some(myriad_client::FsError::QuotaExceeded),
            "{results:?}"
        );
    }
    results.iter().map(|(n, _)| n).sum()
}

/// Creates `dir/f<i>` from `from` on until one is refused; (made, the refusal).
async fn fill(c: Client, dir: String, from: usize) -> (usize, Option<myriad_client::FsError>) {
    let mut made = 0;
    for i in from.. {
        match c.create(&format!("{dir}/f{i}"), 0o644, true, b"x").await {
            Ok(_) => made += 1,
            Err(e) => return (made, Some(e)),
        }
    }
    (made, None)
}

#[test]
fn a_tree_takes_exactly_its_limit_of_names_from_writers_on_every_partition() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let c = tc.client();
    rt.block_on(async {
        c.mkdir("/q", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
        for d in 0..4 {
            c.mkdir(&format!("/q/d{d}"), 0o755)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    });
    let out = tc.cli(&["quota", "set", "/q", "--files", "1000", "--bytes", "1M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Four writers, each in its own directory (spread over the partitions), all at once.
    let dirs = (0..4).map(|d| (format!("/q/d{d}"), 0));
    let made = fill_at_once(&tc, &rt, dirs.collect());
    assert_eq!(made, 996, "1,000 names: the 4 directories and 996 files");
    assert_eq!(rt.block_on(walk(&c, "/q")).0, 1000);
    // Outside the tree nothing is limited; inside, a freed name can be taken again, once.
    rt.block_on(async {
        file(&c, "/outside", 10).await;
        c.unlink("/q/d0/f0").await.unwrap_or_else(|e| panic!("{e}"));
        let (again, e) = fill(c.clone(), "/q/d3".into(), 100_000).await;
        assert_eq!((again, e), (1, Some(myriad_client::FsError::QuotaExceeded)));
        // A directory is a name too; bytes are held to their own limit.
        assert_eq!(
            c.mkdir("/q/d9", 0o755).await.err(),
            Some(myriad_client::FsError::QuotaExceeded)
        );
    });
    let out = tc.cli(&["quota", "set", "/q", "--files", "2000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rt.block_on(async {
        // 996 one-byte files: a file of all but 100 bytes of the MiB left fits.
        file(&c, "/q/d1/big", (1 << 20) - 996 - 100).await;
        let h = c
            .create("/q/d1/more", 0o644, true, b"")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.write(&h, 0, &[1u8; 101]).await.err(),
            Some(myriad_client::FsError::QuotaExceeded),
            "one byte past the limit"
        );
        c.write(&h, 0, &[1u8; 100])
            .await
            .unwrap_or_else(|e| panic!("exactly at it: {e}"));
    });
    let text = get(&tc, "/q");
    assert!(
        text.contains("files 1002 of 2000") && text.contains("bytes 1.0 MiB of 1.0 MiB (100%)"),
        "{text}"
    );
}

/// `setxattr`/`getxattr`/`removexattr` on `path`: 0 or the errno; the value read.
mod xattr {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    fn c(s: &[u8]) -> CString {
        CString::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn errno(r: isize) -> Result<isize, i32> {
        if r < 0 {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(r)
        }
    }

    pub fn set(path: &std::path::Path, name: &str, v: &[u8]) -> Result<isize, i32> {
        let (p, n) = (c(path.as_os_str().as_bytes()), c(name.as_bytes()));
        // SAFETY: valid C strings and buffer.
        errno(
            unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) }
                as isize,
        )
    }

    pub fn get(path: &std::path::Path, name: &str) -> Result<Vec<u8>, i32> {
        let (p, n) = (c(path.as_os_str().as_bytes()), c(name.as_bytes()));
        let mut buf = vec![0u8; 64];
        // SAFETY: valid C strings and buffer.
        let r = errno(unsafe {
            libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        })?;
        buf.truncate(usize::try_from(r).unwrap_or(0));
        Ok(buf)
    }

    pub fn remove(path: &std::path::Path, name: &str) -> Result<isize, i32> {
        let (p, n) = (c(path.as_os_str().as_bytes()), c(name.as_bytes()));
        // SAFETY: valid C strings.
        errno(unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) } as isize)
    }
}

/// Through a mount, as CephFS's `ceph.quota.*`: root sets, reads and removes a limit as an
/// extended attribute of the tree's root, and a create past it fails with EDQUOT.
#[test]
fn a_mount_sets_reads_and_meets_a_quota_through_extended_attributes() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let m = crate::mount::Mount::new(&tc, &[]);
    let lab = m.path("lab");
    std::fs::create_dir(&lab).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        xattr::get(&lab, "myriad.quota.max_files"),
        Err(libc::ENODATA)
    );
    assert_eq!(xattr::set(&lab, "myriad.quota.max_files", b"3"), Ok(0));
    assert_eq!(
        xattr::get(&lab, "myriad.quota.max_files"),
        Ok(b"3".to_vec())
    );
    assert_eq!(
        xattr::get(&lab, "myriad.quota.max_bytes"),
        Err(libc::ENODATA)
    );
    assert_eq!(
        xattr::set(&lab, "myriad.quota.max_files", b"lots"),
        Err(libc::EINVAL)
    );
    assert_eq!(
        xattr::set(&lab, "myriad.quota.other", b"1"),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(
        get(&tc, "/lab").trim_end(),
        "/lab: files 0 of 3 (0%), bytes 0 B (no limit)"
    );
    for i in 0..3 {
        std::fs::write(lab.join(format!("f{i}")), b"x").unwrap_or_else(|e| panic!("{e}"));
    }
    let past = std::fs::write(lab.join("f3"), b"x").err();
    assert_eq!(past.and_then(|e| e.raw_os_error()), Some(libc::EDQUOT));
    assert_eq!(
        std::fs::create_dir(lab.join("d"))
            .err()
            .and_then(|e| e.raw_os_error()),
        Some(libc::EDQUOT)
    );
    // Removed: no limit, the create goes through.
    assert_eq!(xattr::remove(&lab, "myriad.quota.max_files"), Ok(0));
    assert_eq!(
        xattr::get(&lab, "myriad.quota.max_files"),
        Err(libc::ENODATA)
    );
    std::fs::write(lab.join("f3"), b"x").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(get(&tc, "/lab").trim_end(), "/lab: no quota");
}

/// `statvfs(path)`: (size in bytes, free bytes, files, free files).
fn df(path: &std::path::Path) -> (u64, u64, u64, u64) {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs the call fills.
    let r = unsafe { libc::statvfs(p.as_ptr(), &mut s) };
    assert_eq!(
        r,
        0,
        "statvfs {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let unit = s.f_frsize as u64;
    (
        s.f_blocks as u64 * unit,
        s.f_bfree as u64 * unit,
        s.f_files as u64,
        s.f_ffree as u64,
    )
}

/// `df` of a path under a quota shows the quota, as CephFS's client does: its limit as the
/// size, its usage as used; the usage reads as `myriad.quota.used_*` on the quota's root;
/// the mount's root still shows the cluster.
#[test]
fn df_under_a_quota_shows_the_quota_s_limit_and_usage() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "3", "--metrics"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let m = crate::mount::Mount::new(&tc, &[]);
    let lab = m.path("lab");
    let sub = lab.join("sub");
    std::fs::create_dir_all(&sub).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        xattr::set(&lab, "myriad.quota.max_bytes", b"1048576"),
        Ok(0)
    );
    assert_eq!(xattr::set(&lab, "myriad.quota.max_files", b"100"), Ok(0));
    std::fs::write(lab.join("f0"), vec![7u8; 40_960]).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(sub.join("f1"), vec![8u8; 8_192]).unwrap_or_else(|e| panic!("{e}"));
    // Names: sub, f0, f1; bytes: the two files' sizes.
    let used = |name: &str| xattr::get(&lab, name).map(|v| String::from_utf8_lossy(&v).to_string());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while used("myriad.quota.used_files") != Ok("3".into()) && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(used("myriad.quota.used_files"), Ok("3".into()));
    assert_eq!(used("myriad.quota.used_bytes"), Ok("49152".into()));
    assert_eq!(df(&sub), (1_048_576, 1_048_576 - 49_152, 100, 97));
    assert_eq!(df(&lab), df(&sub), "the quota's root shows its own quota");
    let (size, _, files, _) = df(&m.path(""));
    assert_ne!(size, 1_048_576, "the mount's root shows the cluster");
    assert_eq!(files, 1 << 40);
    // Usage is read only, and only on a quota's root.
    assert_eq!(
        xattr::get(&sub, "myriad.quota.used_files"),
        Err(libc::ENODATA)
    );
    assert_eq!(
        xattr::set(&lab, "myriad.quota.used_files", b"0"),
        Err(libc::EOPNOTSUPP)
    );
    // What an operator scrapes: each server its part (summed: the usage), the limit once.
    let sum = |sample: &str| -> u64 {
        (1..=3)
            .map(|id| {
                let at = tc.dir.path().join(format!("node-{id}/metrics.addr"));
                let addr = std::fs::read_to_string(at).unwrap_or_else(|e| panic!("{e}"));
                crate::mount_metrics::value(&crate::mount_metrics::scrape(addr.trim()), sample)
            })
            .sum()
    };
    assert_eq!(sum(r#"myriad_quota_files{path="/lab"} "#), 3);
    assert_eq!(sum(r#"myriad_quota_bytes{path="/lab"} "#), 49_152);
    assert_eq!(sum(r#"myriad_quota_limit_files{path="/lab"} "#), 100);
    assert_eq!(sum(r#"myriad_quota_limit_bytes{path="/lab"} "#), 1_048_576);
}

/// The names `quota get PATH` says the quota on `root` holds.
fn used_files(tc: &TestCluster, path: &str, root: &str) -> u64 {
    let text = get(tc, path);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{root}:")))
        .unwrap_or_else(|| panic!("no quota on {root} in\n{text}"));
    line.split("files ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// With the trash on, a removed file leaves a quota on `/` (docs/quotas.md "The trash"):
/// a full tree takes new files again after an `rm`, a restore takes the name back, and a
/// quota set on the trash counts what it keeps, exactly as a walk does.
#[test]
fn a_quota_on_the_root_leaves_out_what_the_trash_keeps() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let c = tc.client();
    let days = tc.cli(&["trash", "days", "3"]);
    assert!(days.status.success(), "{days:?}");
    rt.block_on(async {
        c.mkdir("/lab", 0o755)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    let out = tc.cli(&["quota", "set", "/", "--files", "12"]);
    assert!(out.status.success(), "{out:?}");
    // /lab and 11 files: full.
    let (made, e) = rt.block_on(fill(c.clone(), "/lab".into(), 0));
    assert_eq!((made, e), (11, Some(myriad_client::FsError::QuotaExceeded)));
    rt.block_on(async {
        for i in 0..5 {
            c.unlink(&format!("/lab/f{i}"))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    });
    // Kept, and out of the quota (the trash's own name too): /lab and 6 files left. The
    // first removal made the trash's directories while the tree was full.
    assert!(trash_lists(&tc, "/lab/f0"));
    assert_eq!(used_files(&tc, "/", "/"), 7);
    let (again, e) = rt.block_on(fill(c.clone(), "/lab".into(), 100));
    assert_eq!((again, e), (5, Some(myriad_client::FsError::QuotaExceeded)));
    // A restore into the full tree is refused; with room, it takes its name back.
    let refused = tc.cli(&["trash", "restore", "/lab/f0"]);
    assert!(!refused.status.success(), "{refused:?}");
    rt.block_on(async {
        c.unlink("/lab/f100")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    let restored = tc.cli(&["trash", "restore", "/lab/f0"]);
    assert!(restored.status.success(), "{restored:?}");
    assert_eq!(used_files(&tc, "/", "/"), 12);
    // Inside the trash no quota on `/` is shown, and a directory's move out of it into
    // the limited tree is answered EXDEV (its entries would arrive unchecked).
    assert_eq!(get(&tc, "/.trash").trim_end(), "/.trash: no quota");
    let root = tc.client_as(tc.map.clone(), Duration::from_secs(10), Caller::root());
    rt.block_on(async {
        let kept_dir = kept_parent(&root, "/lab/f1").await;
        let moved = root
            .rename(&kept_dir, "/lab/back", RenameFlags::default())
            .await;
        assert!(
            matches!(moved, Err(myriad_client::FsError::CrossDevice(_))),
            "{kept_dir}: {moved:?}"
        );
    });
    // A quota on the trash counts what it keeps; the root's, the walk's less the trash.
    let out = tc.cli(&["quota", "set", "/.trash", "--files", "1000"]);
    assert!(out.status.success(), "{out:?}");
    let (all, kept) = rt.block_on(async { (walk(&root, "/").await, walk(&root, "/.trash").await) });
    assert_eq!(used_files(&tc, "/.trash", "/.trash"), kept.0);
    assert_eq!(used_files(&tc, "/lab", "/"), all.0 - kept.0 - 1);
    // A full trash refuses a removal rather than free what it should keep.
    let full = kept.0.to_string();
    let out = tc.cli(&["quota", "set", "/.trash", "--files", &full]);
    assert!(out.status.success(), "{out:?}");
    rt.block_on(async {
        assert_eq!(
            c.unlink("/lab/f5").await.err(),
            Some(myriad_client::FsError::QuotaExceeded)
        );
        assert!(c.stat("/lab/f5").await.is_ok(), "the file stays");
    });
}

/// The directory of the trash that keeps what was removed from `path` (a file).
async fn kept_parent(root: &Client, path: &str) -> String {
    let (dir, name) = myriad_placement::split_parent(path);
    let mut level = vec![myriad_proto::trash::TRASH_ROOT.to_string()];
    // <date>/<uid>/<bucket>, then the original path's directories.
    for _ in 0..3 {
        let mut next = Vec::new();
        for d in level {
            for e in root
                .readdir(&d)
                .await
                .unwrap_or_else(|e| panic!("{d}: {e}"))
            {
                next.push(format!("{d}/{}", e.name));
            }
        }
        level = next;
    }
    for bucket in level {
        let d = format!("{bucket}{dir}");
        if root.stat(&format!("{d}/{name}")).await.is_ok() {
            return d;
        }
    }
    panic!("{path} is not kept")
}

/// Whether `myriad trash list` shows `path`.
fn trash_lists(tc: &TestCluster, path: &str) -> bool {
    let out = tc.cli(&["trash", "list"]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).contains(path)
}

/// A directory's rename across the boundary of a limited quota is answered EXDEV, as XFS
/// and CephFS answer, so `mv` copies the tree and removes it (each step counted and held to
/// the limits); the native client sees `CrossDevice`.
#[test]
fn mv_of_a_directory_across_a_quota_boundary_copies_it() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "2"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let m = crate::mount::Mount::new(&tc, &[]);
    let (lab, out) = (m.path("lab"), m.path("out"));
    std::fs::create_dir_all(lab.join("d/sub")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir(&out).unwrap_or_else(|e| panic!("{e}"));
    for (rel, len) in [("d/a", 10), ("d/sub/b", 70_000)] {
        std::fs::write(lab.join(rel), vec![3u8; len]).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(xattr::set(&lab, "myriad.quota.max_files", b"100"), Ok(0));
    assert_eq!(
        std::fs::rename(lab.join("d"), out.join("d"))
            .err()
            .and_then(|e| e.raw_os_error()),
        Some(libc::EXDEV)
    );
    let c = tc.client_as(tc.map.clone(), Duration::from_secs(10), Caller::root());
    let native = rt.block_on(c.rename("/lab/d", "/out/d2", RenameFlags::default()));
    assert!(
        matches!(native, Err(myriad_client::FsError::CrossDevice(_))),
        "{native:?}"
    );
    let mv = std::process::Command::new("mv")
        .arg(lab.join("d"))
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("mv: {e}"));
    assert!(mv.status.success(), "{mv:?}");
    assert!(!lab.join("d").exists());
    assert_eq!(std::fs::read(out.join("d/a")).ok(), Some(vec![3u8; 10]));
    assert_eq!(
        std::fs::read(out.join("d/sub/b")).ok(),
        Some(vec![3u8; 70_000])
    );
    // The copy left the quota: nothing of it counted in /lab any more.
    wait_get(
        &tc,
        "/lab",
        "/lab: files 0 of 100 (0%), bytes 0 B (no limit)",
    );
}

/// A hard-linked file's bytes count in the quotas of the directory its first name was in
/// when the second was made (docs/quotas.md "Hard links"): growing it through a name
/// outside that tree is held to the tree's byte limit (EDQUOT), and its bytes leave the
/// quota with its last name. Before, its bytes were in no quota once linked.
#[test]
fn a_hard_linked_file_is_held_to_the_byte_limit_of_its_tree() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "2"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let root = tc.client_as(tc.map.clone(), Duration::from_secs(10), Caller::root());
    rt.block_on(async {
        for d in ["/lab", "/out"] {
            root.mkdir(d, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
        }
        file(&root, "/lab/f", 100_000).await;
    });
    let out = tc.cli(&["quota", "set", "/lab", "--bytes", "1000000"]);
    assert!(out.status.success(), "{out:?}");
    let used = |c: &Client| {
        rt.block_on(async {
            let map = c.newest_map().await;
            let id = map
                .quota_at("/lab")
                .map(|q| q.id)
                .unwrap_or_else(|| panic!("no quota"));
            c.quota_usage(id)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|counting| panic!("still counting: {counting:?}"))
        })
    };
    assert_eq!(used(&root), (1, 100_000));
    rt.block_on(async {
        root.link("/lab/f", "/out/g")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    assert_eq!(
        used(&root),
        (1, 100_000),
        "linked: the bytes stay in /lab's quota"
    );
    rt.block_on(async {
        let h = root.open("/out/g").await.unwrap_or_else(|e| panic!("{e}"));
        root.write(&h, 100_000, &vec![1u8; 700_000])
            .await
            .unwrap_or_else(|e| panic!("within the limit: {e}"));
        let past = root.write(&h, 800_000, &vec![2u8; 300_000]).await;
        assert_eq!(past.err(), Some(myriad_client::FsError::QuotaExceeded));
        let st = root.stat("/lab/f").await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(st.size, 800_000, "nothing past the limit");
    });
    assert_eq!(used(&root), (1, 800_000));
    rt.block_on(async {
        root.unlink("/lab/f")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    assert_eq!(
        used(&root),
        (0, 800_000),
        "the bytes stay while a name lives"
    );
    rt.block_on(async {
        root.unlink("/out/g")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    assert_eq!(used(&root), (0, 0), "freed with the last name");
}

/// A directory that splits while writers fill it (docs/quotas.md "Renames, splits and
/// moves"): its entries move to new partitions mid-way, each counted where it lands, and
/// the tree still takes exactly its limit of names, refuses the next with EDQUOT, and
/// its usage equals a walk's count.
#[test]
fn a_directory_that_splits_while_filling_up_takes_exactly_its_limit() {
    let tc = TestCluster::start_with_env(4, &["--replicas", "2", "--dir-split-entries", "64"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let c = tc.client();
    rt.block_on(async {
        for d in ["/q", "/q/big"] {
            c.mkdir(d, 0o755)
                .await
                .unwrap_or_else(|e| panic!("{d}: {e}"));
        }
    });
    let out = tc.cli(&["quota", "set", "/q", "--files", "400"]);
    assert!(out.status.success(), "{out:?}");
    // Three writers in the one directory at once, each its own names.
    let made = fill_at_once(
        &tc,
        &rt,
        (0..3).map(|w| ("/q/big".into(), w * 10_000)).collect(),
    );
    assert_eq!(made, 399, "400 names: /q/big and 399 files");
    assert_eq!(rt.block_on(walk(&c, "/q")), (400, 399));
    assert_eq!(used_files(&tc, "/q", "/q"), 400);
    let fsck = tc.cli(&["fsck"]);
    let text = String::from_utf8_lossy(&fsck.stdout);
    assert!(fsck.status.success() && text.contains("clean"), "{fsck:?}");
    let split: usize = text
        .split(" split into ")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(split >= 1, "the directory never split:\n{text}");
}
