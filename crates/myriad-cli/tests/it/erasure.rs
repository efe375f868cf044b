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
