//! Erasure-coded large files (issue 21, docs/redundancy.md).

/// Fragments (issue 21, docs/redundancy.md) are read only with a capability for their
/// file: a forged one is refused, a good one for a fragment the server does not keep
/// gets `NotFound`, not bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragment_reads_need_a_capability_and_name_what_is_kept() {
    use myriad_client::{Caller, FragmentAt, FsError};
    let tc = crate::harness::TestCluster::start(3);
    let c = crate::index::plain(&tc, Caller::root());
    crate::index::ok(c.create("/big", 0o644, true, b"x").await, "create");
    let h = crate::index::ok(c.open("/big").await, "open");
    let cap = crate::index::ok(c.read_capability(&h).await, "grant");
    let at = FragmentAt {
        ino: h.inode.ino,
        chunk: 1,
        index: 0,
        generation: 1,
    };
    let node = c.map().nodes[0].id;
    assert_eq!(
        c.read_fragment(node, at, (0, 64), cap).await,
        Err(FsError::NotFound)
    );
    let mut forged = cap;
    forged.tag[0] ^= 1;
    assert_eq!(
        c.read_fragment(node, at, (0, 64), forged).await,
        Err(FsError::PermissionDenied)
    );
    let other = FragmentAt {
        ino: myriad_client::InodeId(h.inode.ino.0 + 1),
        ..at
    };
    assert_eq!(
        c.read_fragment(node, other, (0, 64), cap).await,
        Err(FsError::PermissionDenied),
        "a capability is for its own file only"
    );
}

/// `myriad bench capacity` runs end to end on a small set and reports, per file, raw bytes
/// of at least every copy of its data (and no more than copies, checksums and an entry).
#[test]
fn bench_capacity_reports_raw_bytes_per_file() {
    let out_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(crate::harness::BIN)
        .args([
            "bench",
            "capacity",
            "--nodes",
            "4",
            "--max-kib",
            "8",
            "--large-mib",
            "1",
            "--out-dir",
        ])
        .arg(out_dir.path())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json =
        std::fs::read(out_dir.path().join("bench-capacity.json")).unwrap_or_else(|e| panic!("{e}"));
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap_or_else(|e| panic!("{e}"));
    let copies = v["copies"].as_u64().unwrap_or(0);
    assert_eq!(copies, 3);
    let rows = v["rows"].as_array().cloned().unwrap_or_default();
    let sizes: Vec<u64> = rows.iter().filter_map(|r| r["size"].as_u64()).collect();
    assert_eq!(sizes, vec![0, 4096, 8192, 1 << 20]);
    for r in &rows {
        let (size, raw) = (
            r["size"].as_u64().unwrap_or(0),
            r["raw_bytes"].as_u64().unwrap_or(0),
        );
        let blocks = size.div_ceil(65_536);
        assert!(raw >= copies * (size + 4 * blocks), "{r}");
        assert!(raw <= copies * (size + 4 * blocks + 1024), "{r}");
    }
    assert!(out_dir.path().join("bench-capacity.png").exists());
}
