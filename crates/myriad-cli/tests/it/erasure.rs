//! Erasure-coded large files (issue 21, docs/redundancy.md).

use myriad_client::NodeId;

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

/// Deterministic bytes that do not repeat within a chunk.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `myriad du --raw --json PATH` of a cluster, as JSON.
fn du(tc: &crate::harness::TestCluster, path: &str) -> serde_json::Value {
    let out = tc.cli(&["du", "--raw", "--json", path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until every chunk past the first of `path` is coded; returns its `du`. Fails when
/// no further chunk was coded for two minutes (coding stalled), or after ten minutes in
/// all: on a loaded machine (the whole suite on 2 cores) coding 63 chunks has taken more
/// than two minutes while every round made progress.
async fn coded(tc: &crate::harness::TestCluster, path: &str, chunks: u64) -> serde_json::Value {
    use std::time::{Duration, Instant};
    const STALLED: Duration = Duration::from_secs(120);
    const IN_ALL: Duration = Duration::from_secs(600);
    let start = Instant::now();
    let (mut last, mut best, mut progress) = (serde_json::Value::Null, None, start);
    while start.elapsed() < IN_ALL && progress.elapsed() < STALLED {
        last = du(tc, path);
        let now = last["coded_chunks"].as_u64();
        if now == Some(chunks) {
            return last;
        }
        if now > best {
            (best, progress) = (now, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "{path} never had {chunks} chunks coded (none more for {:.0?}, {:.0?} in all): {last}",
        progress.elapsed(),
        start.elapsed()
    );
}

/// Issue 21's done-when: on 6 servers (4+2) a 256 MiB file is erasure coded once settled
/// and then takes at most 1.55 times its bytes; it reads back identical with any two
/// servers killed (the reads decode); a 4 KiB file keeps its full copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_is_coded_and_reads_back_with_two_servers_killed() {
    use myriad_client::Caller;
    use std::time::Duration;
    let tc = crate::harness::TestCluster::start_with(
        6,
        &[
            "--replicas",
            "3",
            "--partitions-per-node",
            "2",
            "--ec-settle-ms",
            "300",
        ],
    );
    let c = crate::index::plain(&tc, Caller::root());
    let big = pattern(256 << 20, 21);
    crate::index::ok(c.create("/big", 0o644, true, b"").await, "create");
    let h = crate::index::ok(c.open("/big").await, "open");
    for (i, piece) in big.chunks(16 << 20).enumerate() {
        crate::index::ok(c.write(&h, (i as u64) << 24, piece).await, "write");
    }
    let small = pattern(4096, 7);
    crate::index::ok(c.create("/small", 0o644, true, &small).await, "small");

    let u = coded(&tc, "/big", 63).await;
    let (logical, raw) = (
        u["logical_bytes"].as_u64().unwrap_or(0),
        u["raw_data_bytes"].as_u64().unwrap_or(u64::MAX),
    );
    assert_eq!(logical, 256 << 20);
    let ratio = raw as f64 / logical as f64;
    eprintln!("256 MiB coded 4+2: raw/logical {ratio:.3}");
    assert!(ratio <= 1.55, "raw/logical {ratio:.3}: {u}");
    let s = du(&tc, "/small");
    assert_eq!(s["coded_chunks"].as_u64(), Some(0));
    assert_eq!(s["raw_data_bytes"].as_u64(), Some(3 * (4096 + 4)), "{s}");

    // Read back whole before anything fails: the data fragments only.
    let fresh = crate::index::plain(&tc, Caller::root());
    let h = crate::index::ok(fresh.open("/big").await, "open");
    let back = crate::index::ok(fresh.read(&h, 0, 256 << 20).await, "read");
    assert!(back == big, "coded file read back different");
    assert_eq!(fresh.degraded_reads(), 0);

    for pair in [[1u32, 2], [5, 6]] {
        // Two servers down at once, then up again before the next two.
        for n in pair {
            tc.kill9(NodeId(n));
        }
        // A request may wait here for the map to settle after two servers died (a server
        // behind it answers `MapTooOld` until it follows): longer than `plain`'s 10 s on
        // two busy cores (one run of the suite: "routing did not settle ... epoch 11").
        let reader = tc.client_as(tc.map.clone(), Duration::from_secs(30), Caller::root());
        let h = crate::index::ok(reader.open("/big").await, "open with two servers down");
        let back = crate::index::ok(reader.read(&h, 0, 256 << 20).await, "degraded read");
        assert!(
            back == big,
            "read back different with servers {pair:?} down"
        );
        assert!(reader.degraded_reads() > 0, "no read had to decode");
        let s = crate::index::ok(reader.read_all("/small").await, "small");
        assert_eq!(s, small);
        for n in pair {
            tc.restart(NodeId(n));
        }
        for n in pair {
            tc.wait_up(&reader, NodeId(n)).await;
        }
    }
}

/// A cluster of 4 (3 copies, chunks coded 0.3 s after their last write) holding `/f`, a
/// file of two chunks with the second coded, stopped so that a test can reach into a
/// server's store.
struct Stopped {
    tc: crate::harness::TestCluster,
    c: myriad_client::Client,
    data: Vec<u8>,
    h: myriad_client::FileHandle,
    chunk: u64,
    record: myriad_client::proto::ec_layout::CodedChunk,
}

async fn coded_and_stopped(seed: u64) -> Stopped {
    let tc =
        crate::harness::TestCluster::start_with(4, &["--replicas", "3", "--ec-settle-ms", "300"]);
    let c = crate::index::plain(&tc, myriad_client::Caller::root());
    let data = pattern((8 << 20) + 1000, seed);
    crate::index::ok(c.create("/f", 0o644, true, b"").await, "create");
    let h = crate::index::ok(c.open("/f").await, "open");
    crate::index::ok(c.write(&h, 0, &data).await, "write");
    coded(&tc, "/f", 2).await;
    let h = crate::index::ok(c.open("/f").await, "open");
    let codes = crate::index::ok(c.chunk_codes(&h, 2).await, "codes");
    let (chunk, record) = codes
        .into_iter()
        .find_map(|(chunk, r)| r.map(|r| (chunk, r)))
        .unwrap_or_else(|| panic!("no coded chunk"));
    let down = tc.cli(&[
        "cluster",
        "down",
        "--data-dir",
        &tc.dir.path().display().to_string(),
    ]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    Stopped {
        tc,
        c,
        data,
        h,
        chunk,
        record,
    }
}

/// A flipped byte in a fragment (below the engine, as a failing disk leaves it): reads
/// decode around it and return the right bytes, `fsck` names it, `fsck --repair` rebuilds
/// it from the others, and reads then take the data fragments alone again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_a_fragment_is_read_around_and_repaired() {
    use std::sync::Arc;

    use myriad_client::Caller;
    use myriad_storage::{FjallKv, FragmentId, FragmentStore, Kv};
    let Stopped {
        tc,
        c,
        data,
        h,
        chunk,
        record,
    } = coded_and_stopped(5).await;
    let server = record.servers[0];
    {
        let kv: Arc<dyn Kv> = Arc::new(
            FjallKv::open(&tc.dir.path().join(format!("node-{server}/store")))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let id = FragmentId {
            ino: h.inode.ino,
            chunk,
            index: 0,
            generation: record.generation,
        };
        assert!(
            FragmentStore::new(kv).corrupt_for_test(id).unwrap_or(false),
            "no fragment 0 of chunk {chunk} on server {server}"
        );
    }
    for n in &tc.map.nodes {
        tc.restart(n.id);
    }
    for n in &tc.map.nodes {
        tc.wait_up(&c, n.id).await;
    }

    let reader = crate::index::plain(&tc, Caller::root());
    let h = crate::index::ok(reader.open("/f").await, "open");
    let back = crate::index::ok(reader.read(&h, 0, data.len() as u64).await, "read");
    assert!(
        back == data,
        "read around the damaged fragment gave other bytes"
    );
    assert!(
        reader.degraded_reads() > 0,
        "the damaged fragment was not noticed"
    );

    let check = tc.cli(&["fsck"]);
    let report = String::from_utf8_lossy(&check.stdout).to_string();
    assert!(
        !check.status.success() && report.contains("bad fragment"),
        "{report}"
    );
    let fix = tc.cli(&["fsck", "--repair"]);
    let fixed = String::from_utf8_lossy(&fix.stdout).to_string();
    assert!(fixed.contains("repaired: bad fragment"), "{fixed}");
    tc.fsck_until_clean().await;

    let reader = crate::index::plain(&tc, Caller::root());
    let h = crate::index::ok(reader.open("/f").await, "open");
    let back = crate::index::ok(reader.read(&h, 0, data.len() as u64).await, "read");
    assert!(back == data);
    assert_eq!(reader.degraded_reads(), 0, "the fragment was not rebuilt");
}

/// A server lost for good (down past the grace): the fragments it held are made again on
/// the servers up (the chunk coded again with their code, 3+2 on the 5 left), so no record
/// names it and every fragment named is there; the file then reads back with one more
/// server killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragments_of_a_lost_server_are_made_again_on_the_others() {
    use myriad_client::Caller;
    let tc = crate::harness::TestCluster::start_with(
        6,
        &[
            "--replicas",
            "3",
            "--ec-settle-ms",
            "300",
            "--down-grace-secs",
            "2",
        ],
    );
    let c = crate::index::plain(&tc, Caller::root());
    let data = pattern(20 << 20, 9);
    crate::index::ok(c.create("/f", 0o644, true, b"").await, "create");
    let h = crate::index::ok(c.open("/f").await, "open");
    crate::index::ok(c.write(&h, 0, &data).await, "write");
    coded(&tc, "/f", 4).await;
    let lost = NodeId(3);
    tc.kill9(lost);
    let mut last = Vec::new();
    for _ in 0..120 {
        let h = crate::index::ok(c.open("/f").await, "open");
        last = crate::index::ok(c.chunk_codes(&h, 4).await, "codes");
        if last.iter().all(|(_, r)| {
            r.as_ref()
                .is_some_and(|r| !r.servers.contains(&lost) && r.servers.len() == 5)
        }) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(
        last.iter()
            .all(|(_, r)| r.as_ref().is_some_and(|r| !r.servers.contains(&lost))),
        "records still name the lost server: {last:?}"
    );
    let check = tc.cli(&["fsck"]);
    let report = String::from_utf8_lossy(&check.stdout).to_string();
    assert!(!report.contains("bad fragment"), "{report}");
    let other = last[0].1.as_ref().map_or(NodeId(1), |r| r.servers[0]);
    tc.kill9(other);
    let reader = crate::index::plain(&tc, Caller::root());
    let h = crate::index::ok(reader.open("/f").await, "open");
    let back = crate::index::ok(reader.read(&h, 0, data.len() as u64).await, "read");
    assert!(back == data, "read back different after the rebuild");
}

/// Writes and cuts into coded chunks: the chunk goes back to copies first (uncoded), the
/// write lands, and every byte reads back as on a local file; an unlink drops the
/// fragments (fsck finds none left behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_cuts_into_coded_chunks_read_back_right() {
    use myriad_client::Caller;
    let tc =
        crate::harness::TestCluster::start_with(4, &["--replicas", "3", "--ec-settle-ms", "300"]);
    let c = crate::index::plain(&tc, Caller::root());
    let mut want = pattern(13 << 20, 3);
    crate::index::ok(c.create("/f", 0o644, true, b"").await, "create");
    let h = crate::index::ok(c.open("/f").await, "open");
    crate::index::ok(c.write(&h, 0, &want).await, "write");
    coded(&tc, "/f", 3).await;

    // A write inside chunk 1 and across chunks 2 and 3.
    let patch = pattern(3000, 8);
    let h = crate::index::ok(c.open("/f").await, "open");
    crate::index::ok(c.write(&h, (5 << 20) + 17, &patch).await, "write in");
    want[(5 << 20) + 17..(5 << 20) + 17 + 3000].copy_from_slice(&patch);
    let across = pattern(1 << 20, 9);
    let at = (12 << 20) - 4096;
    crate::index::ok(c.write(&h, at as u64, &across).await, "write across");
    let end = (at + across.len()).max(want.len());
    want.resize(end, 0);
    want[at..at + across.len()].copy_from_slice(&across);
    let back = crate::index::ok(c.read_all("/f").await, "read");
    assert!(back == want, "read after writes into coded chunks differs");

    // Coded again once settled, then cut inside chunk 2.
    coded(&tc, "/f", 3).await;
    let cut = (9 << 20) + 5;
    crate::index::ok(c.truncate(&h, cut as u64).await, "truncate");
    want.truncate(cut);
    let back = crate::index::ok(c.read_all("/f").await, "read");
    assert!(back == want, "read after a cut into a coded chunk differs");
    // Grown again: the cut-off bytes read as zeros, not as the old fragments.
    crate::index::ok(c.truncate(&h, 13 << 20).await, "extend");
    want.resize(13 << 20, 0);
    let back = crate::index::ok(c.read_all("/f").await, "read");
    assert!(back == want, "bytes past a cut came back");

    coded(&tc, "/f", 2).await;
    crate::index::ok(c.unlink("/f").await, "unlink");
    tc.fsck_until_clean().await;
    let out = tc.cli(&["fsck"]);
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!report.contains("fragment"), "{report}");
}

/// Fragments no record names (a coding, or the drop of an old generation, cut short by a
/// crash): `fsck` names them, `--repair` has the chunk's primary drop them, and the named
/// fragments stay (the file reads back with no degraded read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_fragments_are_named_by_fsck_and_dropped_by_repair() {
    use std::sync::Arc;

    use myriad_client::Caller;
    use myriad_storage::{FjallKv, FragmentId, FragmentStore, Kv};
    let Stopped {
        tc,
        c,
        data,
        h,
        chunk,
        record,
    } = coded_and_stopped(7).await;
    let server = record.servers[0];
    {
        let kv: Arc<dyn Kv> = Arc::new(
            FjallKv::open(&tc.dir.path().join(format!("node-{server}/store")))
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let store = FragmentStore::new(kv);
        let named = FragmentId {
            ino: h.inode.ino,
            chunk,
            index: 0,
            generation: record.generation,
        };
        let fragment = store
            .get(named)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no fragment 0 of chunk {chunk} on server {server}"));
        for generation in [
            record.generation ^ 0x8000_0000,
            record.generation ^ 0x4000_0000,
        ] {
            let orphan = FragmentId {
                generation,
                ..named
            };
            store
                .put(orphan, &fragment)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        store.sync().unwrap_or_else(|e| panic!("{e}"));
    }
    for n in &tc.map.nodes {
        tc.restart(n.id);
    }
    for n in &tc.map.nodes {
        tc.wait_up(&c, n.id).await;
    }

    let check = tc.cli(&["fsck"]);
    let report = String::from_utf8_lossy(&check.stdout).to_string();
    assert!(!check.status.success(), "{report}");
    assert_eq!(report.matches("orphan fragment:").count(), 2, "{report}");
    let fix = tc.cli(&["fsck", "--repair"]);
    let fixed = String::from_utf8_lossy(&fix.stdout).to_string();
    assert_eq!(
        fixed.matches("repaired: orphan fragment").count() - fixed.matches("NOT repaired").count(),
        2,
        "{fixed}"
    );
    assert!(fix.status.success(), "{fixed}");
    tc.fsck_until_clean().await;

    let reader = crate::index::plain(&tc, Caller::root());
    let h = crate::index::ok(reader.open("/f").await, "open");
    let back = crate::index::ok(reader.read(&h, 0, data.len() as u64).await, "read");
    assert!(
        back == data,
        "the named fragments did not survive the repair"
    );
    assert_eq!(reader.degraded_reads(), 0, "a named fragment was dropped");
}
