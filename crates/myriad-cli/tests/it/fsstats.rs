//! `myriad fsstats` and `myriad du` (issue 21): fsstats' histograms of a generated tree
//! match counts computed here independently (plain loops over what the test wrote, not
//! the histogram code); du's bytes match what the test wrote.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::harness::BIN;

/// fsstats' bucket of `v`: [0, edge), then [edge * 2^(i-1), edge * 2^i).
fn bucket(v: u64, edge: u64) -> usize {
    let mut b = 0;
    let mut upper = edge;
    while v >= upper {
        b += 1;
        upper *= 2;
    }
    b
}

/// How many of `values` fall in each bucket.
fn bucket_counts(values: &[u64], edge: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for v in values {
        let b = bucket(*v, edge);
        if out.len() <= b {
            out.resize(b + 1, 0);
        }
        out[b] += 1;
    }
    out
}

fn json_of(path: &Path) -> serde_json::Value {
    json_out(
        &std::process::Command::new(BIN)
            .args(["fsstats", "--json", "--threads", "3"])
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// The JSON a successful command printed.
fn json_out(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"))
}

fn counts(v: &serde_json::Value) -> Vec<u64> {
    let mut c: Vec<u64> = v["counts"]
        .as_array()
        .unwrap_or_else(|| panic!("no counts in {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap_or(u64::MAX))
        .collect();
    while c.last() == Some(&0) {
        c.pop();
    }
    c
}

#[test]
fn fsstats_counts_a_generated_tree_as_computed_independently() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().join("tree");
    let mut sizes = Vec::new();
    let mut entries_per_dir = vec![0u64];
    // 7 directories below the root, files of sizes spread over 0 B .. 300 KiB.
    let mut state = 12345u64;
    let mut rand = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
    entries_per_dir[0] = 7;
    for d in 0..7 {
        let sub = root.join(format!("d{d}"));
        std::fs::create_dir(&sub).unwrap_or_else(|e| panic!("{e}"));
        let n = rand() % 40;
        entries_per_dir.push(n);
        for f in 0..n {
            let size = match rand() % 4 {
                0 => rand() % 2048,
                1 => rand() % 65_536,
                2 => 16_384,
                _ => rand() % 300_000,
            };
            std::fs::write(sub.join(format!("f{f}")), vec![7u8; size as usize])
                .unwrap_or_else(|e| panic!("{e}"));
            sizes.push(size);
        }
    }
    // A symlink and a file with a second name (counted once, as a file with 2 links).
    std::os::unix::fs::symlink("d0/f0-target", root.join("link")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("linked"), b"12345").unwrap_or_else(|e| panic!("{e}"));
    std::fs::hard_link(root.join("linked"), root.join("d0/second-name"))
        .unwrap_or_else(|e| panic!("{e}"));
    sizes.push(5);
    entries_per_dir[0] += 2; // link, linked
    entries_per_dir[1] += 1; // second-name

    let v = json_of(&root);
    let want = bucket_counts(&sizes, 2048);
    assert_eq!(counts(&v["size"]), want, "file size histogram");
    assert_eq!(v["size"]["count"].as_u64(), Some(sizes.len() as u64));
    assert_eq!(
        v["size"]["sum"].as_u64(),
        Some(sizes.iter().sum::<u64>()),
        "total user data"
    );
    let want_dirs = bucket_counts(&entries_per_dir, 1);
    assert_eq!(counts(&v["dir_entries"]), want_dirs, "directory sizes");
    assert_eq!(v["symlinks"]["count"].as_u64(), Some(1));
    assert_eq!(
        v["symlinks"]["sum"].as_u64(),
        Some("d0/f0-target".len() as u64)
    );
    assert_eq!(v["hard_links"]["count"].as_u64(), Some(1));
    assert_eq!(v["hard_links"]["max"].as_u64(), Some(2));
    // Capacity: what the file system says each file takes (st_blocks).
    let mut capacity = 0u64;
    for e in walk(&root) {
        let m = std::fs::symlink_metadata(&e).unwrap_or_else(|e| panic!("{e}"));
        if m.is_file() && !e.ends_with("second-name") {
            capacity += m.blocks() * 512;
        }
    }
    assert_eq!(v["capacity"]["sum"].as_u64(), Some(capacity));
    assert_eq!(v["errors"].as_u64(), Some(0));
}

fn walk(p: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap_or_else(|e| panic!("{e}")) {
        let path = e.unwrap_or_else(|e| panic!("{e}")).path();
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// `fsstats myriad:/PATH` walks a Myriad tree with the native client (no mount): the same
/// counts as computed here from what the test wrote, capacity as `du --raw` counts data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsstats_walks_a_myriad_path_with_the_native_client() {
    use myriad_client::Caller;
    let tc = crate::harness::TestCluster::start_with(3, &["--replicas", "3"]);
    let c = crate::index::plain(&tc, Caller::root());
    crate::index::ok(c.mkdir("/t", 0o755).await, "mkdir");
    let mut sizes = Vec::new();
    for d in 0..3 {
        let dir = format!("/t/d{d}");
        crate::index::ok(c.mkdir(&dir, 0o755).await, "mkdir");
        for f in 0..(4 + d * 3) {
            let size = [10usize, 3000, 16_384, 70_000][f % 4];
            let path = format!("{dir}/f{f}");
            crate::index::ok(
                c.create(&path, 0o644, true, &vec![1u8; size]).await,
                "create",
            );
            sizes.push(size as u64);
        }
    }
    crate::index::ok(c.symlink("d0/f0", "/t/ln").await, "symlink");
    let v = json_out(&tc.cli(&["fsstats", "--json", "myriad:/t"]));
    let want = bucket_counts(&sizes, 2048);
    assert_eq!(counts(&v["size"]), want);
    let total: u64 = sizes.iter().sum();
    assert_eq!(v["size"]["sum"].as_u64(), Some(total));
    let raw: u64 = sizes.iter().map(|s| 3 * (s + 4 * s.div_ceil(65_536))).sum();
    assert_eq!(
        v["capacity"]["sum"].as_u64(),
        Some(raw),
        "three copies of every block with its checksum"
    );
    // /t (3 dirs + a symlink) and d0..d2 (4, 7, 10 files).
    assert_eq!(v["dir_entries"]["count"].as_u64(), Some(4));
    assert_eq!(v["dir_entries"]["sum"].as_u64(), Some(4 + 4 + 7 + 10));
    assert_eq!(v["symlinks"]["count"].as_u64(), Some(1));
    assert_eq!(v["errors"].as_u64(), Some(0));
}

/// `myriad du --raw`: logical bytes as written, raw data as every copy of every block with
/// its checksum, a file with two names counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn du_counts_logical_and_raw_bytes_of_a_tree() {
    use myriad_client::Caller;
    let tc = crate::harness::TestCluster::start_with(3, &["--replicas", "2"]);
    let c = crate::index::plain(&tc, Caller::root());
    crate::index::ok(c.mkdir("/u", 0o755).await, "mkdir");
    crate::index::ok(c.mkdir("/u/d", 0o755).await, "mkdir");
    let sizes = [0u64, 1, 65_536, 65_537, 200_000];
    for (n, size) in sizes.iter().enumerate() {
        let path = format!("/u/d/f{n}");
        let data = vec![9u8; *size as usize];
        crate::index::ok(c.create(&path, 0o644, true, &data).await, "create");
    }
    crate::index::ok(c.link("/u/d/f4", "/u/second").await, "link");
    let v = json_out(&tc.cli(&["du", "--json", "/u"]));
    assert_eq!(v["files"].as_u64(), Some(5), "two names, one file");
    assert_eq!(v["dirs"].as_u64(), Some(2));
    assert_eq!(v["copies"].as_u64(), Some(2));
    assert_eq!(v["logical_bytes"].as_u64(), Some(sizes.iter().sum()));
    let raw: u64 = sizes.iter().map(|s| 2 * (s + 4 * s.div_ceil(65_536))).sum();
    assert_eq!(v["raw_data_bytes"].as_u64(), Some(raw));
    let meta = v["raw_metadata_bytes"].as_u64().unwrap_or(0);
    assert!(meta > 0 && meta < 2 * 8 * 512, "{meta}");
    assert_eq!(v["raw_bytes"].as_u64(), Some(raw + meta));
}

/// `fsstats --kept` answers from what the servers keep as files change: after creates,
/// a growing file, unlinks, a symlink and a directory split over partitions, the same
/// counts as computed here from what the test did (ages and capacity are not kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsstats_cluster_keeps_counts_as_files_change() {
    use myriad_client::Caller;
    let tc = crate::harness::TestCluster::start_with(
        3,
        &[
            "--replicas",
            "2",
            "--dir-split-entries",
            "64",
            "--kept-stats",
        ],
    );
    let c = crate::index::plain(&tc, Caller::root());
    crate::index::ok(c.mkdir("/t", 0o755).await, "mkdir");
    let mut sizes = std::collections::BTreeMap::new();
    let mut dirs = vec![("/".to_string(), 1u64), ("/t".to_string(), 0)];
    for d in 0..3 {
        let dir = format!("/t/d{d}");
        crate::index::ok(c.mkdir(&dir, 0o755).await, "mkdir");
        let n = 4 + d * 3;
        for f in 0..n {
            let size = [10usize, 3000, 16_384, 70_000][f % 4];
            let path = format!("{dir}/f{f}");
            crate::index::ok(
                c.create(&path, 0o644, true, &vec![1u8; size]).await,
                "create",
            );
            sizes.insert(path, size as u64);
        }
        dirs.push((dir, n as u64));
    }
    // A directory past the split threshold (64): its shards end on several partitions.
    crate::index::ok(c.mkdir("/t/huge", 0o755).await, "mkdir");
    for f in 0..300 {
        let path = format!("/t/huge/h{f}");
        crate::index::ok(c.create(&path, 0o644, true, b"x").await, "create");
        sizes.insert(path, 1);
    }
    crate::index::ok(c.symlink("d0/f0", "/t/ln").await, "symlink");
    // A file grows, two go.
    let h = crate::index::ok(c.open("/t/d1/f0").await, "open");
    crate::index::ok(c.write(&h, 200_000, b"end").await, "write");
    sizes.insert("/t/d1/f0".into(), 200_003);
    for gone in ["/t/d2/f1", "/t/huge/h7"] {
        crate::index::ok(c.unlink(gone).await, "unlink");
        sizes.remove(gone);
    }
    dirs[1].1 = 3 + 1 + 1; // d0..d2, huge, ln
    dirs[4].1 -= 1; // d2
    dirs.push(("/t/huge".into(), 299));

    let values: Vec<u64> = sizes.values().copied().collect();
    let want_sizes = bucket_counts(&values, 2048);
    let entries: Vec<u64> = dirs.iter().map(|(_, n)| *n).collect();
    let want_dirs = bucket_counts(&entries, 1);
    // The split may still be moving entries: wait until it settled.
    let mut last = serde_json::Value::Null;
    for _ in 0..100 {
        last = json_out(&tc.cli(&["fsstats", "--kept", "--json"]));
        if counts(&last["size"]) == want_sizes && counts(&last["dir_entries"]) == want_dirs {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(counts(&last["size"]), want_sizes, "{last}");
    assert_eq!(
        last["size"]["sum"].as_u64(),
        Some(values.iter().sum::<u64>())
    );
    assert_eq!(counts(&last["dir_entries"]), want_dirs, "{last}");
    assert_eq!(
        last["dir_entries"]["sum"].as_u64(),
        Some(entries.iter().sum::<u64>())
    );
    assert_eq!(last["symlinks"]["count"].as_u64(), Some(1));
    assert_eq!(last["partitions_not_counted"].as_u64(), Some(0));
    // Names: every entry under / once (files, directories, the symlink).
    assert_eq!(
        last["name_len"]["count"].as_u64(),
        Some(sizes.len() as u64 + 5 + 1)
    );
    // The tables print too.
    let out = tc.cli(&["fsstats", "--kept"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
