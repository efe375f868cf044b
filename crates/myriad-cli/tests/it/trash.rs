//! The trash through real server processes and a mount (docs/trash.md, step 1): with
//! `myriad trash days N` an `rm -rf` by a user keeps every file in
//! `/.trash/<date>/<uid>/<path>`, readable by that user and root only, and `myriad trash
//! restore` gives every byte back; `purge` frees it; with the trash off an unlink frees
//! the file as before.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::harness::TestCluster;
use crate::mount::Mount;

fn ok_cli(tc: &TestCluster, args: &[&str]) -> String {
    let out = tc.cli(args);
    assert!(
        out.status.success(),
        "myriad {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `myriad ARGS` as uid/gid `id` on a client machine: the map and the client key copied
/// where that user can read them. Its output; it must succeed.
fn cli_as(tc: &TestCluster, id: u32, args: &[&str]) -> String {
    let dir = tempfile::Builder::new()
        .prefix("myriad-trash-cli-")
        .tempdir()
        .unwrap_or_else(|e| panic!("{e}"));
    for f in ["cluster.json", "client.key"] {
        let to = dir.path().join(f);
        std::fs::copy(tc.dir.path().join(f), &to).unwrap_or_else(|e| panic!("{f}: {e}"));
        std::os::unix::fs::chown(&to, Some(id), Some(id)).unwrap_or_else(|e| panic!("{e}"));
    }
    std::os::unix::fs::chown(dir.path(), Some(id), Some(id)).unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(crate::harness::BIN)
        .arg("--cluster")
        .arg(dir.path().join("cluster.json"))
        .args(args)
        .uid(id)
        .gid(id)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "myriad {args:?} as {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `script` in `dir` as uid/gid `id`; returns (success, stdout + stderr).
fn sh_as(id: u32, dir: &Path, script: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .uid(id)
        .gid(id)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Waits (at most 10 s) until every server of `tc` follows a map whose trash keeps files
/// `days` days: a change sent before one does would be freed (or kept) as before.
async fn every_server_keeps(tc: &TestCluster, days: u32) {
    let c = tc.client();
    for n in tc.map.nodes.iter().map(|n| n.id.0) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while c
            .get_map(myriad_client::NodeId(n))
            .await
            .map_or(true, |m| m.ext.trash_days != days)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "server {n} does not follow the trash's {days} days"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

/// Flushes what the mount answered behind (its write-behind journals) to the servers,
/// before the servers' view is checked by the CLI: an fsync of a directory makes every
/// change the mount answered durable (`sync -f` does not reach a FUSE daemon).
fn settle(m: &Mount) {
    std::fs::File::open(m.path(""))
        .and_then(|d| d.sync_all())
        .unwrap_or_else(|e| panic!("fsync of the mount's root: {e}"));
}

/// Three servers, two copies, the trash on for 3 days on every server.
fn keeping_three_days() -> (TestCluster, tokio::runtime::Runtime) {
    let tc = TestCluster::start_with(3, &["--replicas", "2"]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    ok_cli(&tc, &["trash", "days", "3"]);
    rt.block_on(every_server_keeps(&tc, 3));
    (tc, rt)
}

/// Directory `name` at the mount's root, made and given to user 1000.
fn users_dir(m: &Mount, name: &str) -> std::path::PathBuf {
    let dir = m.path(name);
    std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::chown(&dir, Some(1000), Some(1000)).unwrap_or_else(|e| panic!("{e}"));
    dir
}

/// The `i` for which directory `<dir>/x<i>` is placed on another partition than
/// `<dir>/x0` (a rename between them goes between two partitions).
fn placed_apart(tc: &TestCluster, dir: &str) -> u32 {
    let ring = tc.map.ring();
    let owner = |i: u32| ring.owner_of_dir(&format!("{dir}/x{i}"));
    (1..100)
        .find(|&i| owner(i) != owner(0))
        .unwrap_or_else(|| panic!("no directory placed apart from {dir}/x0"))
}

/// The test's files: (relative path, contents), one of them past the first chunk.
fn tree() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for (i, len) in [0usize, 1, 4096, 100_000, 5 << 20].into_iter().enumerate() {
        let bytes = (0..len).map(|b| (b * 31 + i * 7) as u8).collect();
        files.push((format!("src/d{}/f{i}.bin", i % 2), bytes));
    }
    files.push(("src/top.txt".to_string(), b"top\n".to_vec()));
    files
}

#[test]
fn rm_rf_with_the_trash_on_then_restore_gives_back_every_byte() {
    let tc = TestCluster::start_with_env(3, &["--replicas", "3"], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    assert!(ok_cli(&tc, &["trash", "days"]).contains("off"));
    assert!(ok_cli(&tc, &["trash", "days", "7"]).contains("trash: 7 days"));
    assert!(ok_cli(&tc, &["trash", "days"]).contains("kept 7 days"));
    let m = Mount::new(&tc, &[]);
    let proj = users_dir(&m, "proj");
    // User 1000 makes the tree and removes it with rm -rf.
    let files = tree();
    for (rel, bytes) in &files {
        let p = proj.join(rel);
        let (ok, out) = sh_as(
            1000,
            &proj,
            &format!(
                "mkdir -p {}",
                p.parent()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            ),
        );
        assert!(ok, "{out}");
        let staged = tc.dir.path().join("staged");
        std::fs::write(&staged, bytes).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&staged, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{e}"));
        let (ok, out) = sh_as(1000, &proj, &format!("cat {} > {rel}", staged.display()));
        assert!(ok, "{out}");
    }
    let (ok, out) = sh_as(1000, &proj, "rm -rf src && test ! -e src");
    assert!(ok, "rm -rf: {out}");
    settle(&m);

    // Kept under today's date and the owner's uid, the owner's alone.
    let listed = ok_cli(&tc, &["trash", "list"]);
    for (rel, bytes) in &files {
        let line = listed
            .lines()
            .find(|l| l.ends_with(&format!(" /proj/{rel}")))
            .unwrap_or_else(|| panic!("/proj/{rel} not listed:\n{listed}"));
        assert!(line.contains(&format!(" {} ", bytes.len())), "{line}");
        assert!(line.contains(" 1000 "), "{line}");
    }
    // A user (a client key, as uid 1000; `/.trash` itself they may not list) sees their
    // own; another user nothing.
    let mine_listed = cli_as(&tc, 1000, &["trash", "list"]);
    assert_eq!(mine_listed.lines().count(), files.len(), "{mine_listed}");
    assert!(cli_as(&tc, 1001, &["trash", "list"]).trim().is_empty());
    let date = listed
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    let mine = m.path(&format!(".trash/{date}/1000"));
    let meta = std::fs::metadata(&mine).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((meta.uid(), meta.mode() & 0o777), (1000, 0o700));
    // In the bucket the server chose (a number: the kept name's partition is the file's).
    let buckets: Vec<_> = std::fs::read_dir(&mine)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|b| b.join("proj/src/top.txt").exists())
        .collect();
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    let kept = buckets[0].join("proj/src/top.txt");
    let bucket = buckets[0]
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    assert!(bucket.parse::<u32>().is_ok(), "{bucket}");
    let (ok, out) = sh_as(1000, &proj, &format!("cat {}", kept.display()));
    assert!(ok && out == "top\n", "the owner reads it: {out}");
    let (ok, _) = sh_as(1001, &proj, &format!("cat {}", kept.display()));
    assert!(!ok, "another user does not");
    let (ok, _) = sh_as(1001, &proj, &format!("ls {}", m.path(".trash").display()));
    assert!(!ok, "nor lists the trash");

    // Restored byte for byte, with its directories made again.
    let out = ok_cli(&tc, &["trash", "restore", "/proj/src"]);
    assert!(
        out.contains(&format!("restored {} file(s)", files.len())),
        "{out}"
    );
    for (rel, bytes) in &files {
        let back = std::fs::read(proj.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(
            back == *bytes,
            "{rel}: {} bytes back of {}",
            back.len(),
            bytes.len()
        );
    }
    assert!(
        ok_cli(&tc, &["trash", "list"]).trim().is_empty(),
        "nothing left kept"
    );
    // A restore over an existing file is refused.
    std::fs::remove_file(proj.join("src/top.txt")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(proj.join("src/top.txt"), b"new\n").unwrap_or_else(|e| panic!("{e}"));
    settle(&m);
    let refused = tc.cli(&["trash", "restore", "/proj/src/top.txt"]);
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("exists"), "{why}");
    let out = ok_cli(
        &tc,
        &[
            "trash",
            "restore",
            "/proj/src/top.txt",
            "--to",
            "/proj/old.txt",
        ],
    );
    assert!(out.contains("restored 1 file(s)"), "{out}");
    assert_eq!(
        std::fs::read(proj.join("old.txt")).unwrap_or_default(),
        b"top\n"
    );

    // Purged: freed. With the trash off, an unlink frees at once.
    std::fs::remove_file(proj.join("old.txt")).unwrap_or_else(|e| panic!("{e}"));
    settle(&m);
    assert!(!ok_cli(&tc, &["trash", "list"]).trim().is_empty());
    assert!(ok_cli(&tc, &["trash", "purge"]).contains("purged 1 day(s)"));
    assert!(ok_cli(&tc, &["trash", "list"]).trim().is_empty());
    // A removal after today's purge is kept (its directories made again); so is one whose
    // path holds, as a directory, the name of a file kept earlier the same day.
    std::fs::write(proj.join("x"), b"file x\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(proj.join("x")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir(proj.join("x")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(proj.join("x/y"), b"file x/y\n").unwrap_or_else(|e| panic!("{e}"));
    // (Made at the servers first: a create and its unlink both still in the mount's
    // journal never reach them, docs/trash.md "Not yet".)
    settle(&m);
    std::fs::remove_file(proj.join("x/y")).unwrap_or_else(|e| panic!("{e}"));
    settle(&m);
    let listed = ok_cli(&tc, &["trash", "list"]);
    assert!(listed.contains(" /proj/x\n"), "{listed}");
    assert!(listed.contains(" /proj/x/y\n"), "{listed}");
    std::fs::remove_dir(proj.join("x")).unwrap_or_else(|e| panic!("{e}"));
    let out = ok_cli(&tc, &["trash", "restore", "/proj/x/y", "--to", "/proj/y"]);
    assert!(out.contains("restored 1 file(s)"), "{out}");
    assert_eq!(
        std::fs::read(proj.join("y")).unwrap_or_default(),
        b"file x/y\n"
    );
    ok_cli(&tc, &["trash", "purge"]);
    ok_cli(&tc, &["trash", "days", "0"]);
    let c = tc.client();
    rt.block_on(every_server_keeps(&tc, 0));
    std::fs::remove_file(proj.join("src/top.txt")).unwrap_or_else(|e| panic!("{e}"));
    settle(&m);
    let gone = rt.block_on(c.stat("/proj/src/top.txt"));
    assert!(
        matches!(gone, Err(myriad_client::FsError::NotFound)),
        "{gone:?}"
    );
    assert!(
        ok_cli(&tc, &["trash", "list"]).trim().is_empty(),
        "freed, not kept"
    );
}

/// The trash is turned on only once every server speaks protocol 38: an older one would
/// drop the setting from the maps it passes on and free what it unlinks.
#[test]
fn the_trash_is_refused_while_a_server_speaks_an_older_protocol() {
    let before = myriad_placement::map_wire::TRASH_SINCE - 1;
    let old = before.to_string();
    let tc = TestCluster::start_with_env(1, &[], &[("MYRIAD_PROTOCOL_NEWEST", old.as_str())]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::protocol_floor::floor_at(&tc.client(), before));
    let out = tc.cli(&["trash", "days", "7"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "turned on at floor {before}");
    assert!(
        err.contains(&format!(
            "the trash needs every server on protocol 38 or later; this cluster's floor is {before}"
        )),
        "{err}"
    );
    assert!(ok_cli(&tc, &["trash", "days"]).contains("off"));
}

/// Docs/trash.md "Expiry": a day kept longer than `trash days` is freed in the background,
/// tree and all (files on every partition, then its directories from the deepest up,
/// each removed by the partition holding its name), and a day still kept is not touched.
#[test]
fn a_day_kept_past_its_days_is_freed_in_the_background_and_a_kept_day_stays() {
    let tc = TestCluster::start_with(3, &["--replicas", "2", "--trash-expiry-secs", "1"]);
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(crate::redirect::floor_raised(&tc));
    let c = tc.client();
    let old = "/.trash/2020-01-01";
    rt.block_on(async {
        // An old day's tree, as a server would have kept it (made here by root directly),
        // over every partition: many directories, a file in each, a bigger one too.
        for d in 0..12 {
            let dir = format!("{old}/1000/0/proj/d{d}/deep/er");
            c.mkdir_p(&dir, 0o700)
                .await
                .unwrap_or_else(|e| panic!("{dir}: {e}"));
            for (at, size) in [
                (dir.as_str(), 100),
                (&format!("{old}/1000/0/proj/d{d}")[..], 5000),
            ] {
                let f = format!("{at}/f{d}");
                c.write_file(&f, 0o600, &vec![b'x'; size])
                    .await
                    .unwrap_or_else(|e| panic!("{f}: {e}"));
            }
        }
        c.write_file("/kept.txt", 0o644, b"kept today\n")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    });
    // Off: nothing expires, however old.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(rt.block_on(c.stat(old)).is_ok(), "freed with the trash off");
    ok_cli(&tc, &["trash", "days", "7"]);
    rt.block_on(every_server_keeps(&tc, 7));
    rt.block_on(c.unlink("/kept.txt"))
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while rt.block_on(c.stat(old)).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{old} not freed within 90 s:\n{}",
            ok_cli(&tc, &["trash", "list"])
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Today's removal is still kept, whole.
    let listed = ok_cli(&tc, &["trash", "list"]);
    assert!(listed.contains(" /kept.txt"), "{listed}");
    assert!(!listed.contains("2020-01-01"), "{listed}");
    ok_cli(&tc, &["trash", "restore", "/kept.txt"]);
    let back = rt.block_on(c.read_all("/kept.txt"));
    assert_eq!(back.ok().as_deref(), Some(&b"kept today\n"[..]));
}

/// Docs/trash.md: a file replaced by a rename (`mv new old`, an editor's save) is kept as
/// an unlinked one is, under its owner's directory, and comes back byte for byte; a second
/// save of the same name the same day is kept beside the first.
#[test]
fn a_file_replaced_by_a_rename_is_kept_and_restored() {
    let (tc, rt) = keeping_three_days();
    let m = Mount::new(&tc, &[]);
    let proj = users_dir(&m, "proj");
    let (ok, out) = sh_as(
        1000,
        &proj,
        "printf 'first\\n' > notes && printf 'second\\n' > .notes.swp && mv .notes.swp notes \
         && printf 'third\\n' > .notes.swp && mv .notes.swp notes && cat notes",
    );
    assert!(ok && out == "third\n", "{out}");
    settle(&m);
    let listed = ok_cli(&tc, &["trash", "list"]);
    let kept: Vec<&str> = listed
        .lines()
        .filter(|l| l.contains("/proj/notes"))
        .collect();
    assert_eq!(kept.len(), 2, "both replaced versions kept:\n{listed}");
    assert!(kept.iter().all(|l| l.contains(" 1000 ")), "{listed}");
    // The user restores the most recent beside the current file.
    cli_as(
        &tc,
        1000,
        &["trash", "restore", "/proj/notes", "--to", "/proj/notes.old"],
    );
    let back = std::fs::read(proj.join("notes.old")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        String::from_utf8_lossy(&back),
        "second\n",
        "the most recent"
    );
    assert_eq!(
        std::fs::read(proj.join("notes")).unwrap_or_else(|e| panic!("{e}")),
        b"third\n"
    );
    // With the trash off, a replaced file is freed as before.
    ok_cli(&tc, &["trash", "purge"]);
    ok_cli(&tc, &["trash", "days", "0"]);
    rt.block_on(every_server_keeps(&tc, 0));
    let (ok, out) = sh_as(1000, &proj, "printf 'x\\n' > n2 && mv n2 notes");
    assert!(ok, "{out}");
    settle(&m);
    assert!(
        !ok_cli(&tc, &["trash", "list"]).contains("/proj/notes"),
        "kept with the trash off"
    );
}

/// Docs/trash.md step 3: a file replaced by a rename from a directory on another partition
/// (`mv` between two directories placed apart, a rename between partitions) is kept too,
/// each time, and so is the last name of a hard-linked file (not its other names, whose
/// file lives on); each restored byte for byte by its user.
#[test]
fn files_replaced_from_another_partition_and_last_names_of_linked_files_are_kept() {
    let (tc, _rt) = keeping_three_days();
    // Two directories whose names live on different partitions.
    let there = placed_apart(&tc, "/proj");
    let m = Mount::new(&tc, &[]);
    let proj = users_dir(&m, "proj");
    let script = format!(
        "mkdir x0 x{there} && printf 'one\\n' > x0/f && printf 'two\\n' > x{there}/n \
         && mv x{there}/n x0/f && printf 'three\\n' > x{there}/n && mv x{there}/n x0/f \
         && cat x0/f"
    );
    let (ok, out) = sh_as(1000, &proj, &script);
    assert!(ok && out == "three\n", "{out}");
    settle(&m);
    let listed = ok_cli(&tc, &["trash", "list"]);
    let kept = listed.lines().filter(|l| l.contains("/proj/x0/f")).count();
    assert_eq!(kept, 2, "both replaced versions kept:\n{listed}");
    // Restored by their user, one then the other (the most recent first).
    for (to, want) in [("/proj/x0/f.b", "two\n"), ("/proj/x0/f.a", "one\n")] {
        cli_as(&tc, 1000, &["trash", "restore", "/proj/x0/f", "--to", to]);
        let back = std::fs::read(m.path(&to[1..])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(String::from_utf8_lossy(&back), want, "{to}");
    }
    assert_eq!(
        std::fs::read(proj.join("x0/f")).unwrap_or_else(|e| panic!("{e}")),
        b"three\n"
    );
    // A file with two names (in the two directories): the first removed goes, the last
    // is kept, with the file's contents.
    let script =
        format!("printf 'linked\\n' > x0/l && ln x0/l x{there}/l && rm x0/l && rm x{there}/l");
    let (ok, out) = sh_as(1000, &proj, &script);
    assert!(ok, "{out}");
    settle(&m);
    let listed = ok_cli(&tc, &["trash", "list"]);
    assert!(
        !listed.contains("/proj/x0/l"),
        "a name whose file had another kept:\n{listed}"
    );
    let last = format!("/proj/x{there}/l");
    assert!(listed.contains(&last), "the last name not kept:\n{listed}");
    cli_as(&tc, 1000, &["trash", "restore", &last]);
    assert_eq!(
        std::fs::read(m.path(&last[1..])).unwrap_or_else(|e| panic!("{e}")),
        b"linked\n"
    );
    // The last name of a linked file replaced by a rename, within its directory and from
    // the other directory's partition: kept, and restored with the file's contents.
    let script = format!(
        "printf 'L1\n' > x0/m && ln x0/m x{there}/m && rm x0/m \
         && printf 'R1\n' > x{there}/t && mv x{there}/t x{there}/m \
         && printf 'L2\n' > x0/k && ln x0/k x{there}/k && rm x{there}/k \
         && printf 'R2\n' > x{there}/s && mv x{there}/s x0/k"
    );
    let (ok, out) = sh_as(1000, &proj, &script);
    assert!(ok, "{out}");
    settle(&m);
    let listed = ok_cli(&tc, &["trash", "list"]);
    for (path, was, now) in [
        (format!("/proj/x{there}/m"), "L1\n", "R1\n"),
        ("/proj/x0/k".to_string(), "L2\n", "R2\n"),
    ] {
        assert!(listed.contains(&path), "{path} not kept:\n{listed}");
        let to = format!("{path}.old");
        cli_as(&tc, 1000, &["trash", "restore", &path, "--to", &to]);
        let read = |p: &str| std::fs::read(m.path(&p[1..])).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(read(&to), was.as_bytes(), "{path}");
        assert_eq!(read(&path), now.as_bytes(), "{path}");
    }
}

/// A file made and removed at once through the mount (both answered behind, from the
/// mount's write-behind journal) reaches the servers as a create then an unlink, and the
/// unlink keeps it: each restored byte for byte.
#[test]
fn files_made_and_removed_at_once_through_the_mount_are_kept() {
    let (tc, rt) = keeping_three_days();
    let m = Mount::new(&tc, &[]);
    let tmp = users_dir(&m, "tmp");
    let counters = tc.client();
    let batches = || {
        let by_op = rt.block_on(crate::leases::received_by_op(&counters));
        by_op.get("batch").copied().unwrap_or(0)
    };
    let before = batches();
    let (ok, out) = sh_as(
        1000,
        &tmp,
        "for i in 0 1 2 3 4 5 6 7; do printf \"scratch $i\\n\" > s$i; rm s$i; done; ls",
    );
    assert!(ok && out.is_empty(), "{out}");
    settle(&m);
    assert!(batches() > before, "answered behind: no batch sent");
    let listed = ok_cli(&tc, &["trash", "list"]);
    for i in 0..8 {
        assert!(
            listed.contains(&format!("/tmp/s{i}")),
            "s{i} not kept:\n{listed}"
        );
        cli_as(&tc, 1000, &["trash", "restore", &format!("/tmp/s{i}")]);
        let back = std::fs::read(tmp.join(format!("s{i}"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, format!("scratch {i}\n").into_bytes());
    }
}

/// Two names of one file removed at the same moment (docs/trash.md "As built (step 3,
/// part 3)"): the inode's home tells one of them it is the last, which is kept,
/// so no file with two names is freed by removing both at once. Before, both could hear
/// "two links", both went, and the file was freed.
#[test]
fn of_two_names_of_a_file_removed_at_once_one_is_kept() {
    let (tc, rt) = keeping_three_days();
    let there = placed_apart(&tc, "/pairs");
    let root = tc.client_as(
        tc.map.clone(),
        std::time::Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    const PAIRS: usize = 24;
    rt.block_on(async {
        for d in [
            "/pairs".to_string(),
            "/pairs/x0".into(),
            format!("/pairs/x{there}"),
        ] {
            root.mkdir(&d, 0o755)
                .await
                .unwrap_or_else(|e| panic!("{d}: {e}"));
        }
        for i in 0..PAIRS {
            let (a, b) = (format!("/pairs/x0/l{i}"), format!("/pairs/x{there}/l{i}"));
            root.create(&a, 0o644, true, format!("pair {i}\n").as_bytes())
                .await
                .unwrap_or_else(|e| panic!("{a}: {e}"));
            root.link(&a, &b)
                .await
                .unwrap_or_else(|e| panic!("{b}: {e}"));
        }
        // Both names of each file at once, every pair at once.
        let removals = (0..PAIRS).map(|i| {
            let root = &root;
            async move {
                let (a, b) = (format!("/pairs/x0/l{i}"), format!("/pairs/x{there}/l{i}"));
                let (ra, rb) = tokio::join!(root.unlink(&a), root.unlink(&b));
                ra.unwrap_or_else(|e| panic!("{a}: {e}"));
                rb.unwrap_or_else(|e| panic!("{b}: {e}"));
            }
        });
        futures::future::join_all(removals).await;
    });
    let listed = ok_cli(&tc, &["trash", "list"]);
    for i in 0..PAIRS {
        let kept = [format!("/pairs/x0/l{i}"), format!("/pairs/x{there}/l{i}")]
            .iter()
            .filter(|p| listed.lines().any(|l| l.ends_with(&format!(" {p}"))))
            .count();
        assert!(kept >= 1, "neither name of pair {i} kept:\n{listed}");
    }
    // What was kept is the file, byte for byte.
    let to = "/pairs/back";
    let kept0 = if listed.contains(" /pairs/x0/l0") {
        "/pairs/x0/l0".to_string()
    } else {
        format!("/pairs/x{there}/l0")
    };
    ok_cli(&tc, &["trash", "restore", &kept0, "--to", to]);
    let back = rt.block_on(async { root.read_all(to).await });
    assert_eq!(back.unwrap_or_else(|e| panic!("{e}")), b"pair 0\n");
}
