//! Real programs, unchanged, against a real FUSE mount of a 4-node cluster, compared with
//! the same work on local disk.

use std::path::Path;

use crate::harness::TestCluster;
use crate::mount::{Mount, sh};

/// A tarball of part of this machine's Python standard library (a real source tree: nested
/// packages, symlink-free, a few hundred files of all sizes).
fn stdlib_tarball(out: &Path) -> String {
    let stdlib = sh(
        Path::new("/"),
        "python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])'",
    );
    let stdlib = stdlib.trim();
    sh(
        Path::new(stdlib),
        &format!(
            "tar --exclude=__pycache__ -cf {} json email http logging importlib collections \
             urllib xml wsgiref concurrent asyncio unittest string.py textwrap.py",
            out.display()
        ),
    );
    stdlib.to_string()
}

#[test]
fn tar_diff_cp_rsync_git_python_sqlite_through_the_mount() {
    let c = TestCluster::start(4);
    let m = Mount::new(&c, &[]);
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tar = work.path().join("src.tar");
    stdlib_tarball(&tar);
    let local = work.path().join("local");
    std::fs::create_dir(&local).unwrap_or_else(|e| panic!("{e}"));
    let mnt = m.dir.path();

    // Extract the same tarball locally and into the mount: identical trees.
    sh(&local, &format!("tar -xf {}", tar.display()));
    sh(
        mnt,
        &format!("mkdir src && tar -C src -xf {}", tar.display()),
    );
    let files = sh(&local, "find . -type f | wc -l");
    assert!(files.trim().parse::<u32>().unwrap_or(0) > 150, "{files}");
    sh(mnt, &format!("diff -r {} src", local.display()));

    // A tarball with hard links: extracted as links (one inode, link count 2).
    sh(
        work.path(),
        "mkdir hl && echo same > hl/one && ln hl/one hl/two && tar -cf hl.tar hl",
    );
    sh(
        mnt,
        &format!(
            "tar -xf {}/hl.tar && diff -r {}/hl hl",
            work.path().display(),
            work.path().display()
        ),
    );
    let links = sh(mnt, "stat -c '%h %i' hl/one hl/two");
    let rows: Vec<&str> = links.lines().collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], rows[1], "both names: same inode, same count");
    assert!(rows[0].starts_with("2 "), "{links}");

    // cp -a and rsync -a round trips: into the mount and back out, modes and times kept.
    sh(mnt, &format!("cp -a {}/email cpa", local.display()));
    sh(
        mnt,
        &format!("cp -a cpa {}/cpa-back", work.path().display()),
    );
    sh(work.path(), "diff -r local/email cpa-back");
    let modes = |p: &str| {
        sh(
            Path::new("/"),
            &format!("cd {p} && find . -printf '%m %T@ %p\\n' | sort"),
        )
    };
    assert_eq!(
        modes(&local.join("email").display().to_string()),
        modes(&mnt.join("cpa").display().to_string()),
        "cp -a keeps modes and mtimes"
    );
    sh(mnt, &format!("rsync -a {}/json/ rs/", local.display()));
    sh(
        mnt,
        &format!("rsync -a rs/ {}/rs-back/", work.path().display()),
    );
    sh(work.path(), "diff -r local/json rs-back");
    // A second rsync finds nothing to copy (sizes and mtimes match).
    let again = sh(
        mnt,
        &format!("rsync -a --itemize-changes {}/json/ rs/", local.display()),
    );
    assert!(again.trim().is_empty(), "rsync saw changes: {again}");

    // git: init, add, commit, log, and a clean status.
    sh(
        mnt,
        "mkdir repo && cd repo && cp -r ../src/json . && git init -q . \
         && git -c user.email=t@example.com -c user.name=t add -A \
         && git -c user.email=t@example.com -c user.name=t commit -qm first \
         && echo change >> json/__init__.py \
         && git -c user.email=t@example.com -c user.name=t commit -qam second",
    );
    let log = sh(
        &mnt.join("repo"),
        "git log --oneline | wc -l; git status --porcelain | wc -l; git fsck --no-progress 2>&1 | wc -l",
    );
    let counts: Vec<&str> = log.split_whitespace().collect();
    if counts != ["2", "0", "0"] {
        // Once, under the whole suite's load: no commits and one line of fsck (git's own
        // words were not kept). Say what git says, and what the mount shows, next time.
        let why = sh(
            &mnt.join("repo"),
            "git status 2>&1 | head -5; git log --oneline 2>&1 | head -3; ls -la; \
             ls -la .git 2>&1 | head -20; cat .git/HEAD 2>&1 || true; \
             ls -la .git/refs/heads 2>&1 || true",
        );
        panic!("git through the mount: {log}\n{why}");
    }
    assert_eq!(counts, ["2", "0", "0"], "{log}");

    // Python imports a package tree from the mount (and writes its bytecode cache there).
    let py = sh(
        mnt,
        "PYTHONPATH=src python3 -c 'import importlib, json, email.parser, urllib.parse; \
         print(json.__file__); print(json.dumps({\"a\": [1, 2]}))'",
    );
    assert!(
        py.contains(&format!("{}/src/json/__init__.py", mnt.display())),
        "{py}"
    );
    assert!(py.contains("{\"a\": [1, 2]}"), "{py}");

    // sqlite: create, insert in a transaction, query.
    let q = sh(
        mnt,
        "sqlite3 db.sqlite 'create table t(a integer, b text); begin; \
         insert into t values (1, \"x\"), (2, \"y\"), (3, \"z\"); commit; \
         create index ti on t(b); select count(*), sum(a) from t; pragma integrity_check;'",
    );
    assert_eq!(
        q.split_whitespace().collect::<Vec<_>>(),
        ["3|6", "ok"],
        "{q}"
    );
}

#[test]
fn two_gib_file_with_dd_matches_its_sha256_after_remount() {
    const GIB2: u64 = 2 << 30;
    // The file's bytes are streamed from /dev/urandom through `tee` (its sha256 taken on the
    // way), so the disk holds one copy of them, not a source file besides. A machine whose
    // disk cannot hold them plus the reserve cannot run this test: say so rather than
    // report a full disk as a file system fault.
    let c = TestCluster::start_with(4, &["--disk-reserve-mib", "64"]);
    let (_, free) = crate::full_disk::statvfs(c.dir.path());
    if free < GIB2 + (512 << 20) {
        eprintln!(
            "SKIPPED: {} has {} MiB free; a 2 GiB file needs 2,560 MiB",
            c.dir.path().display(),
            free >> 20
        );
        return;
    }
    let mut m = Mount::new(&c, &[]);
    let work = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = sh(
        m.dir.path(),
        &format!(
            "set -o pipefail; head -c {GIB2} /dev/urandom \
               | tee >(sha256sum | cut -d' ' -f1 > {sum}) \
               | dd of=big bs=1M iflag=fullblock status=none \
             && wait && stat -c %s big",
            sum = work.path().join("sum").display()
        ),
    );
    assert_eq!(out.trim(), GIB2.to_string());
    // `tee`'s process substitution may finish after the pipeline: wait for its sum.
    let mut want = String::new();
    for _ in 0..100 {
        want = std::fs::read_to_string(work.path().join("sum")).unwrap_or_default();
        if want.trim().len() == 64 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(want.trim().len(), 64, "no sha256 of the written stream");
    // Read back through a fresh mount, so nothing comes from the kernel's page cache.
    m.unmount();
    let m2 = Mount::new(&c, &[]);
    let got = sh(m2.dir.path(), "sha256sum big | cut -d' ' -f1");
    assert_eq!(got.trim(), want.trim(), "2 GiB file read back differs");
    sh(m2.dir.path(), "rm big && test ! -e big");
}

#[test]
fn two_mounts_see_each_others_writes_at_open_close_to_open() {
    let c = TestCluster::start(4);
    let a = Mount::new(&c, &[]);
    let b = Mount::new(&c, &[]);
    let (pa, pb) = (a.path("shared.txt"), b.path("shared.txt"));
    std::fs::write(&pa, b"version one").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(&pb).unwrap_or_default(), b"version one");
    // b has the file cached (pages and attributes); a rewrites it longer, then shorter.
    std::fs::write(&pa, b"version two, longer than the first").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        std::fs::read(&pb).unwrap_or_default(),
        b"version two, longer than the first"
    );
    std::fs::write(&pa, b"3").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(&pb).unwrap_or_default(), b"3");
    // Appends from both sides, each closing before the other opens.
    for i in 0..5 {
        let (w, _) = if i % 2 == 0 { (&pa, &pb) } else { (&pb, &pa) };
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(w)
            .unwrap_or_else(|e| panic!("{e}"));
        std::io::Write::write_all(&mut f, format!("{i}").as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(std::fs::read(&pa).unwrap_or_default(), b"301234");
    assert_eq!(std::fs::read(&pb).unwrap_or_default(), b"301234");
    // Same size, other bytes, after b's attribute and entry TTLs ran out (b's next lookup
    // sees the new mtime before the open): b must not serve its old pages.
    std::fs::write(&pa, b"AAAAAA").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(&pb).unwrap_or_default(), b"AAAAAA");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(&pa, b"BBBBBB").unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let _ = std::fs::metadata(&pb);
    assert_eq!(std::fs::read(&pb).unwrap_or_default(), b"BBBBBB");
    // A file created on a is visible on b at once (no negative caching by default).
    assert!(!b.path("new.txt").exists());
    std::fs::write(a.path("new.txt"), b"n").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(b.path("new.txt")).unwrap_or_default(), b"n");
}

#[test]
fn writeback_cache_mount_writes_what_a_plain_mount_reads() {
    let c = TestCluster::start(4);
    let w = Mount::new(&c, &["--", "--writeback-cache"]);
    sh(
        w.dir.path(),
        "echo one > a && echo two >> a && head -c 300000 /dev/urandom > r && cp r r.orig \
         && printf x | dd of=r bs=1 seek=5000 conv=notrunc status=none \
         && sqlite3 db 'create table t(a); insert into t values (1), (2);'",
    );
    let orig = std::fs::read(w.path("r.orig")).unwrap_or_default();
    drop(w);
    let plain = Mount::new(&c, &[]);
    assert_eq!(
        std::fs::read(plain.path("a")).unwrap_or_default(),
        b"one\ntwo\n"
    );
    let mut want = orig;
    want[5000] = b'x';
    assert_eq!(std::fs::read(plain.path("r")).unwrap_or_default(), want);
    let q = sh(plain.dir.path(), "sqlite3 db 'select sum(a) from t'");
    assert_eq!(q.trim(), "3");
}
