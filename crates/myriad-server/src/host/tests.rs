//! The process layer through its seams: a real host on an in-memory disk, its peers behind
//! a `Transport` that answers nothing (they are down) or is held (a peer that answers late),
//! and an authority that always grants the lease. Primary terms (docs/replication.md): a
//! partition serves only through maps that directly follow each other and keep this server
//! its primary (simulation seed 9107).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use myriad_proto::{Caller, ClientRequest, Endpoints, RaftRpc, Request, Response};
use myriad_storage::MemKv;
use tokio::sync::Notify;

use super::*;
use crate::commit::{Runner, Syncer};
use crate::embed::VIRTUAL_EPOCH_NS;

/// Peers that do not answer; while `held`, a call waits until `release` (a backup that
/// answers late, so that a map can change while a partition opens).
#[derive(Default)]
struct Silent {
    held: AtomicBool,
    release: Notify,
}

impl Transport for Silent {
    fn call_with_timeout<'a>(
        &'a self,
        addr: &'a str,
        _epoch: u64,
        _ends: Endpoints,
        _caller: &'a Caller,
        _req: &'a Request,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<myriad_proto::Response, WireError>> {
        Box::pin(async move {
            if self.held.load(Ordering::SeqCst) {
                self.release.notified().await;
            }
            Err(WireError::Unavailable(format!("{addr}: down")))
        })
    }
}

struct AlwaysLeased;

impl Authority for AlwaysLeased {
    fn lease_error(&self) -> Option<WireError> {
        None
    }
    fn grant_lease(&self, _from: NodeId, _epoch: u64, _version: u16) -> Response {
        Response::Lease {
            granted: false,
            epoch: 0,
        }
    }
    fn propose_map(&self, _map: ClusterMap) -> BoxFuture<'_, Result<(), WireError>> {
        Box::pin(async { Err(WireError::Unavailable("not here".into())) })
    }
    fn committed_map(&self) -> Option<ClusterMap> {
        None
    }
    fn leader(&self) -> Option<u64> {
        None
    }
    fn serve_raft(&self, _rpc: RaftRpc, _p: Vec<u8>) -> BoxFuture<'_, Result<Response, WireError>> {
        Box::pin(async { Err(WireError::Protocol("no group".into())) })
    }
}

/// Server 1 of a two-server map (two copies of each partition), on a fresh disk.
fn host(transport: Arc<Silent>) -> Arc<Host> {
    let addrs = vec!["sim-1".to_string(), "sim-2".to_string()];
    let map = ClusterMap::build(1, &addrs, 2, 2);
    let keys = myriad_proto::auth::Keyring::from_secret(&[7u8; 32]);
    let config = ServerConfig::new(NodeId(1), std::env::temp_dir(), map.clone(), keys);
    let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
    let runner = Runner::Tasks {
        fsync: Duration::ZERO,
    };
    let syncer = Syncer::start(kv.clone(), runner).unwrap_or_else(|e| panic!("syncer: {e}"));
    let (map_news, _) = watch::channel(Arc::new(MapState::new(map)));
    Host::assemble(HostParts {
        config,
        kv,
        syncer,
        runner,
        clock: crate::clock::Clock::Virtual {
            start: tokio::time::Instant::now(),
            epoch_ns: VIRTUAL_EPOCH_NS,
        },
        transport,
        authority: Arc::new(AlwaysLeased),
        map_news,
        tiers: None,
    })
}

fn map(h: &Host) -> ClusterMap {
    h.state().map.clone()
}

async fn reconcile(h: &Arc<Host>) {
    if let Err(e) = h.reconcile().await {
        panic!("reconcile: {}", e.into_fs());
    }
}

/// The partitions server 1 is primary of, with what serves them now.
fn served(h: &Host) -> Vec<(PartitionId, Arc<Partition>)> {
    let st = h.state();
    st.map
        .primaries_of(h.id)
        .into_iter()
        .map(|p| match h.serving(p, st.map.epoch) {
            Ok(node) => (p, node),
            Err(e) => panic!("partition {p} not served at epoch {}: {e}", st.map.epoch),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_directly_following_map_keeps_the_partitions_served() {
    let h = host(Arc::new(Silent::default()));
    reconcile(&h).await;
    let before = served(&h);
    assert!(!before.is_empty());
    // Epoch 2: server 2 down; server 1 keeps its partitions (and takes the others).
    let next = map(&h)
        .mark_down(NodeId(2))
        .unwrap_or_else(|| panic!("server 2 is up"));
    assert_eq!(next.epoch, 2);
    h.install_map(next)
        .await
        .unwrap_or_else(|e| panic!("install: {e}"));
    let after = served(&h);
    for (pid, node) in &before {
        let (_, now) = after
            .iter()
            .find(|(p, _)| p == pid)
            .unwrap_or_else(|| panic!("partition {pid} no longer served"));
        assert!(Arc::ptr_eq(node, now), "partition {pid} was reopened");
        assert_eq!(now.primary_through(), 2);
    }
    assert!(
        after.len() > before.len(),
        "server 2's partitions came over"
    );
}

#[tokio::test(start_paused = true)]
async fn a_map_that_skips_epochs_reopens_the_partitions() {
    let h = host(Arc::new(Silent::default()));
    reconcile(&h).await;
    let before = served(&h);
    // Epoch 3 without epoch 2: in between, server 2 may have been primary of any of them.
    let m2 = map(&h).mark_down(NodeId(2)).unwrap_or_else(|| panic!("up"));
    let m3 = m2.mark_up(NodeId(2)).unwrap_or_else(|| panic!("down"));
    assert_eq!(m3.epoch, 3);
    assert!(
        h.adopt_map(m3.clone())
            .unwrap_or_else(|e| panic!("adopt: {e}"))
    );
    // Deposed at once, before any reconcile: no request served, nothing committed.
    for (pid, node) in &before {
        assert!(
            matches!(h.serving(*pid, 3), Err(WireError::Busy)),
            "partition {pid} served across a gap"
        );
        let refused = node
            .applier
            .run(Mutation::InitRoot {
                now: 1,
                uid: 0,
                gid: 0,
            })
            .await;
        assert!(
            matches!(refused, Err(WireError::Unavailable(_))),
            "a deposed partition committed: {refused:?}"
        );
    }
    reconcile(&h).await;
    let after = served(&h);
    assert_eq!(after.len(), m3.primaries_of(NodeId(1)).len());
    for (pid, node) in &after {
        assert_eq!(node.primary_through(), 3);
        if let Some((_, old)) = before.iter().find(|(p, _)| p == pid) {
            assert!(!Arc::ptr_eq(old, node), "partition {pid} was not reopened");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_partition_opened_while_the_map_changed_is_opened_again() {
    let silent = Arc::new(Silent::default());
    let h = host(silent.clone());
    // Opening asks the backup (held): the map moves on meanwhile (server 2 down).
    silent.held.store(true, Ordering::SeqCst);
    let opening = {
        let h = h.clone();
        tokio::spawn(async move { h.reconcile().await.map_err(OpenError::into_fs) })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let m2 = map(&h).mark_down(NodeId(2)).unwrap_or_else(|| panic!("up"));
    assert!(h.adopt_map(m2).unwrap_or_else(|e| panic!("{e}")));
    silent.held.store(false, Ordering::SeqCst);
    silent.release.notify_waiters();
    match opening.await {
        Ok(Ok(())) => {}
        other => panic!("reconcile: {other:?}"),
    }
    // Opened (and caught up) under epoch 1, kept only if opened again under epoch 2.
    let now = served(&h);
    assert_eq!(now.len(), 4, "every partition is server 1's at epoch 2");
    for (_, node) in now {
        assert_eq!(node.primary_through(), 2);
    }
}

#[tokio::test(start_paused = true)]
async fn a_partition_request_from_a_server_not_its_primary_is_refused() {
    let h = host(Arc::new(Silent::default()));
    let m2 = map(&h).mark_down(NodeId(2)).unwrap_or_else(|| panic!("up"));
    h.install_map(m2.clone())
        .await
        .unwrap_or_else(|e| panic!("install: {e}"));
    let target = h.state().ring.owner_of_dir("/");
    let source = m2
        .partitions
        .iter()
        .map(|p| p.id)
        .find(|&p| p != target)
        .unwrap_or_else(|| panic!("one partition only"));
    let ask = |node_id: NodeId| {
        let frame = myriad_proto::RequestFrame {
            id: 1,
            epoch: m2.epoch,
            ends: Endpoints { target, source },
            caller: Caller::root(),
            body: Request::from(myriad_proto::ClientRequest::Stat { path: "/".into() }),
        };
        let peer = myriad_net::Peer {
            kind: myriad_proto::PeerKind::Server { node_id },
            credential: myriad_proto::auth::Credential::Cluster,
            zone: "".into(),
            version: myriad_proto::PROTOCOL_VERSION,
        };
        myriad_net::Handler::handle(h.clone(), peer, frame)
    };
    // Server 2 is not the primary of `source` (server 1 is): a deposed primary's task.
    let refused = ask(NodeId(2)).await.result;
    assert!(
        matches!(refused, Err(WireError::Redirect(_))),
        "a request for a partition its sender does not serve: {refused:?}"
    );
    let served = ask(NodeId(1)).await.result;
    assert!(
        !matches!(served, Err(WireError::Redirect(_))),
        "the primary's own request: {served:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deposed_partition_calls_no_other_partition() {
    let h = host(Arc::new(Silent::default()));
    reconcile(&h).await;
    let (pid, node) = served(&h)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("nothing served"));
    let m3 = map(&h)
        .mark_down(NodeId(2))
        .and_then(|m| m.mark_up(NodeId(2)))
        .unwrap_or_else(|| panic!("maps"));
    assert!(h.adopt_map(m3).unwrap_or_else(|e| panic!("{e}")));
    let body = Request::from(myriad_proto::ClientRequest::Stat { path: "/".into() });
    let call = node.call_node(pid, body).await;
    assert!(
        matches!(call, Err(WireError::Unavailable(_))),
        "a deposed partition's call went out: {call:?}"
    );
}

/// Recovery acts only on intents still there once it holds them (simulation seed 20090):
/// a mkdir listed by recovery, then completed and undone before recovery reached it, must
/// not be rolled forward (its directory object would come back as an orphan).
#[tokio::test(start_paused = true)]
async fn recovery_leaves_alone_an_intent_its_operation_ended_after_the_listing() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let (txid, _) = mkdir_begun(&home).await;
    let listed: Vec<u64> = home
        .store
        .intents()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert!(listed.contains(&txid));
    // The operation ends (undone) before recovery gets to it.
    for m in [
        Mutation::Decide {
            txid,
            decision: crate::state::intent::Decision::Abort,
        },
        Mutation::ResolveEntry {
            dir: "/".into(),
            name: "x".into(),
            txid,
            commit: false,
        },
    ] {
        home.applier
            .run(m)
            .await
            .unwrap_or_else(|e| panic!("ending the mkdir: {e}"));
    }
    home.recover_listed(&listed, &std::collections::BTreeSet::new(), true)
        .await;
    assert!(!object(&h), "recovery made the directory object again");
    assert!(!visible(&home), "recovery revealed the entry");
}

/// The partition serving the root's entries, once its root directory exists.
async fn root_home(h: &Arc<Host>) -> Arc<Partition> {
    let m2 = map(h).mark_down(NodeId(2)).unwrap_or_else(|| panic!("up"));
    h.install_map(m2)
        .await
        .unwrap_or_else(|e| panic!("install: {e}"));
    let home = h
        .partition(h.state().ring.owner_of_entry("/x"))
        .unwrap_or_else(|| panic!("the root's partition is served here"));
    for _ in 0..100 {
        if home.store.dir("/").ok().flatten().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    home
}

/// The first step of a mkdir of `/x` applied at `home`: its txid and the directory's inode.
async fn mkdir_begun(home: &Partition) -> (u64, myriad_proto::InodeId) {
    match home
        .applier
        .run(Mutation::MkdirBegin {
            dir: "/".into(),
            name: "x".into(),
            mode: 0o755,
            depth: 0,
            uid: 0,
            gid: 0,
            now: 1,
            once: None,
            ino: None,
        })
        .await
    {
        Ok(crate::state::mutation::Outcome::Begun { txid, inode }) => (txid, inode.ino),
        other => panic!("mkdir begins: {:?}", other.err()),
    }
}

fn visible(home: &Partition) -> bool {
    home.store
        .entry("/", "x")
        .ok()
        .flatten()
        .is_some_and(|e| e.inode.is_some() && e.pending.is_none())
}

fn object(h: &Host) -> bool {
    h.partition(h.state().ring.owner_of_dir("/x"))
        .and_then(|p| p.store.dir("/x").ok().flatten())
        .is_some()
}

/// A mkdir whose coordinator stopped after its intent (the client got no answer) is rolled
/// forward: the directory exists, entry and object, and the intent is gone.
#[tokio::test(start_paused = true)]
async fn recovery_rolls_an_undecided_mkdir_forward() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let (txid, _) = mkdir_begun(&home).await;
    assert!(!visible(&home) && !object(&h));
    home.recover(&std::collections::BTreeSet::new(), true).await;
    assert!(visible(&home), "the entry is not revealed");
    assert!(object(&h), "the directory object was not made");
    assert!(home.store.intent(txid).ok().flatten().is_none());
}

/// A mkdir decided aborted (the client was told it failed) is undone: no entry, no object.
#[tokio::test(start_paused = true)]
async fn recovery_undoes_an_aborted_mkdir() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let (txid, _) = mkdir_begun(&home).await;
    home.applier
        .run(Mutation::Decide {
            txid,
            decision: crate::state::intent::Decision::Abort,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    home.recover(&std::collections::BTreeSet::new(), true).await;
    assert!(!visible(&home) && !object(&h));
    assert!(home.store.entry("/", "x").ok().flatten().is_none());
    assert!(home.store.intent(txid).ok().flatten().is_none());
}

/// A mkdir of the root of a tree moving between placements answers `Busy` and leaves
/// nothing behind: made now, its object would stay where the move is leaving, after a
/// move that found no root to copy (simulation seed 220 with --zones --tree-moves).
#[tokio::test(start_paused = true)]
async fn a_mkdir_of_a_moving_trees_root_is_refused_busy_until_the_move_settles() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let moving = map(&h)
        .with_policy_arriving("/x", "", 1, 1)
        .unwrap_or_else(|e| panic!("a policy arriving: {e}"));
    let epoch = moving.epoch;
    h.install_map(moving)
        .await
        .unwrap_or_else(|e| panic!("install: {e}"));
    for _ in 0..100 {
        if home.state().map.epoch == epoch {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        home.state().map.epoch,
        epoch,
        "the partition follows the map"
    );
    let mkdir = |path: &str| ClientRequest::Mkdir {
        path: path.into(),
        mode: 0o755,
        shards: 1,
    };
    assert_eq!(send_once(&home, 1, mkdir("/x")).await, Err(WireError::Busy));
    assert!(home.store.entry("/", "x").ok().flatten().is_none());
    assert!(!object(&h), "the directory object was left behind");
    // Another name is made as before.
    assert!(send_once(&home, 2, mkdir("/y")).await.is_ok());
}

/// A client's change sent once, as its first try or as a retry with the same id.
async fn send_once(
    home: &Arc<Partition>,
    seq: u64,
    request: ClientRequest,
) -> Result<Response, WireError> {
    send_once_as(home, seq, request, false).await
}

/// `send_once`, answered once applied if `visible`.
async fn send_once_as(
    home: &Arc<Partition>,
    seq: u64,
    request: ClientRequest,
    visible: bool,
) -> Result<Response, WireError> {
    let once = myriad_proto::Envelope::Once(myriad_proto::SentOnce {
        id: test_once_id(seq),
        request,
        visible,
    });
    from_client(home, once).await
}

/// The id of the test client's change number `seq`.
fn test_once_id(seq: u64) -> myriad_proto::OnceId {
    myriad_proto::OnceId {
        client: 77,
        seq,
        low: seq,
    }
}

/// `request` from a client, under the partition's own map.
async fn from_client(
    home: &Arc<Partition>,
    request: impl Into<myriad_proto::Envelope>,
) -> Result<Response, WireError> {
    let epoch = home.state().map.epoch;
    home.dispatch(None, epoch, Caller::root(), Request::Client(request.into()))
        .await
}

fn create(path: &str) -> ClientRequest {
    ClientRequest::Create(myriad_proto::requests::Create {
        path: path.into(),
        mode: 0o644,
        exclusive: true,
        data: b"first".to_vec(),
        durable: true,
        ino: None,
        data_at: None,
        then: None,
    })
}

/// Creates `/x` as the test client's change number 1: the new file.
async fn created_x(home: &Arc<Partition>) -> myriad_proto::Inode {
    match send_once(home, 1, create("/x")).await {
        Ok(Response::Changed {
            inode: Some(made), ..
        }) => made,
        other => panic!("create: {other:?}"),
    }
}

/// Docs/write-path.md, "Exactly once": a retried create answers its first outcome (not
/// `AlreadyExists`), a retried unlink too (not `NotFound`), and the same request under a
/// new number runs again.
#[tokio::test(start_paused = true)]
async fn a_retried_change_answers_its_first_outcome() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let made = created_x(&home).await;
    let again = send_once(&home, 1, create("/x")).await;
    match &again {
        Ok(Response::Changed { inode: Some(i), .. }) => assert_eq!(i.ino, made.ino),
        other => panic!("a retried create: {other:?}"),
    }
    // A new change (a new number) is a new create: the name is taken.
    let new = send_once(&home, 2, create("/x")).await;
    assert_eq!(new, Err(WireError::AlreadyExists));
    let unlink = || ClientRequest::Unlink { path: "/x".into() };
    assert!(send_once(&home, 3, unlink()).await.is_ok());
    assert!(
        send_once(&home, 3, unlink()).await.is_ok(),
        "a retried unlink"
    );
    assert_eq!(
        send_once(&home, 4, unlink()).await,
        Err(WireError::NotFound)
    );
    // Only changes are sent once.
    let stat = ClientRequest::Stat { path: "/".into() };
    assert!(matches!(
        send_once(&home, 5, stat).await,
        Err(WireError::InvalidArgument(_))
    ));
}

/// What partition `home` recorded of change `request` sent once as `seq`
/// (`Envelope::Recorded`).
async fn recorded(
    home: &Arc<Partition>,
    seq: u64,
    request: ClientRequest,
) -> Result<Response, WireError> {
    let ask = myriad_proto::Envelope::Recorded {
        id: test_once_id(seq),
        request,
    };
    from_client(home, ask).await
}

/// A partition asked for the outcome of a change (its retry goes elsewhere now) answers
/// what it recorded, and `None` for a change it never applied, without applying it.
#[tokio::test(start_paused = true)]
async fn a_partition_answers_the_outcome_it_recorded_of_a_change_and_applies_nothing() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let made = created_x(&home).await;
    match recorded(&home, 1, create("/x")).await {
        Ok(Response::Recorded(Some(answer))) => match *answer {
            Response::Changed { inode: Some(i), .. } => assert_eq!(i.ino, made.ino),
            other => panic!("the recorded create: {other:?}"),
        },
        other => panic!("asked for a recorded create: {other:?}"),
    }
    // Never sent here: nothing recorded, and asking applies nothing.
    assert_eq!(
        recorded(&home, 2, create("/y")).await,
        Ok(Response::Recorded(None))
    );
    let stat = |path: &str| ClientRequest::Stat { path: path.into() };
    assert_eq!(
        from_client(&home, stat("/y")).await,
        Err(WireError::NotFound)
    );
    // Only changes are asked after.
    assert!(matches!(
        recorded(&home, 3, stat("/")).await,
        Err(WireError::InvalidArgument(_))
    ));
}

/// A hard link whose coordinator died after the new name was made but before the outcome
/// was recorded: the retry (same id) answers the linked file, with one link per name, not
/// `AlreadyExists` (the name's partition recorded the change's name mark with the name).
#[tokio::test(start_paused = true)]
async fn a_retried_link_whose_name_was_made_answers_the_file_and_counts_one_link() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let made = send_once(&home, 1, create("/a")).await;
    assert!(matches!(made, Ok(Response::Changed { .. })), "{made:?}");
    let a = h
        .partition(h.state().ring.owner_of_entry("/a"))
        .unwrap_or_else(|| panic!("/a's partition is served here"));
    let link = || ClientRequest::Link {
        from: "/a".into(),
        to: "/b".into(),
    };
    let first = send_once(&a, 2, link()).await;
    let Ok(Response::Attr(linked)) = &first else {
        panic!("link: {first:?}");
    };
    assert_eq!(linked.nlink, 2);
    // The coordinator died before the outcome's own batch: no record of the change.
    let mut forget = myriad_storage::Batch::new();
    a.store.delete_outcome(&mut forget, 77, 2);
    a.store
        .commit(forget)
        .unwrap_or_else(|e| panic!("forgetting the outcome: {e}"));
    let again = send_once(&a, 2, link()).await;
    match &again {
        Ok(Response::Attr(i)) => {
            assert_eq!(i.ino, linked.ino);
            assert_eq!(i.nlink, 2, "the retry's own link was not taken back");
        }
        other => panic!("the retried link: {other:?}"),
    }
    // A new change (a new number) is a new link: the name is taken.
    assert_eq!(
        send_once(&a, 3, link()).await,
        Err(WireError::AlreadyExists)
    );
    let stat = |path: &str| ClientRequest::Stat { path: path.into() };
    match from_client(&a, stat("/a")).await {
        Ok(Response::Attr(i)) => assert_eq!(i.nlink, 2),
        other => panic!("stat /a: {other:?}"),
    }
}

/// The number of the last batch partition `p` committed.
fn batches_of(p: &Partition) -> u64 {
    p.store
        .meta_u64(crate::commit::SEQ_KEY)
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// A change made of several mutations (a mkdir: intent, directory object, decision)
/// records its answer with its decision; its retry gets it.
#[tokio::test(start_paused = true)]
async fn a_retried_mkdir_answers_its_first_outcome() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let mkdir = || ClientRequest::Mkdir {
        path: "/x".into(),
        mode: 0o755,
        shards: 1,
    };
    let seq = || batches_of(&home);
    let before = seq();
    let first = send_once(&home, 1, mkdir()).await;
    assert!(
        matches!(first, Ok(Response::Changed { inode: Some(_), .. })),
        "{first:?}"
    );
    // The intent's batch, the directory object (this partition's too), the resolution
    // with the outcome, and the root's touch: no batch of its own for the outcome (5
    // batches until stop 65).
    assert_eq!(seq() - before, 4, "batches of a mkdir at its coordinator");
    assert!(visible(&home) && object(&h));
    // The same directory; the parent's attributes are not recorded (the client fetches
    // them).
    let made = |r: Result<Response, WireError>| match r {
        Ok(Response::Changed { inode, .. }) => inode,
        other => panic!("{other:?}"),
    };
    assert_eq!(made(send_once(&home, 1, mkdir()).await), made(first));
    assert_eq!(
        send_once(&home, 2, mkdir()).await,
        Err(WireError::AlreadyExists)
    );
}

/// A change whose completing mutation has nothing worth recording (a create that opens an
/// existing name: running it again gives the same answer) costs no batch of its own.
#[tokio::test(start_paused = true)]
async fn an_open_of_an_existing_name_records_nothing() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    assert!(send_once(&home, 1, create("/x")).await.is_ok());
    let seq = || batches_of(&home);
    let before = seq();
    let open = ClientRequest::Create(myriad_proto::requests::Create {
        path: "/x".into(),
        mode: 0o644,
        exclusive: false,
        data: Vec::new(),
        durable: true,
        ino: None,
        data_at: None,
        then: None,
    });
    assert!(matches!(
        send_once(&home, 2, open).await,
        Ok(Response::Attr(_))
    ));
    assert_eq!(seq(), before, "the open committed a batch");
    assert_eq!(
        crate::state::outcomes::recorded(&home.store, 77, 2)
            .ok()
            .flatten(),
        None
    );
}

/// docs/fuse.md "Durability": a change sent `visible` is answered once applied, naming
/// the primary's incarnation; a barrier with that incarnation succeeds, with another (the
/// primary changed since) it reports that the changes may be lost. A change spanning
/// partitions is answered durable, as before.
#[tokio::test(start_paused = true)]
async fn a_change_answered_once_applied_names_its_incarnation_and_a_sync_checks_it() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let answer = send_once_as(&home, 1, create("/v"), true).await;
    let Ok(Response::Applied {
        answer,
        incarnation,
    }) = answer
    else {
        panic!("a visible create: {answer:?}");
    };
    assert!(
        matches!(*answer, Response::Changed { inode: Some(_), .. }),
        "{answer:?}"
    );
    assert_eq!(incarnation, home.incarnation);
    assert!(home.store.entry("/", "v").ok().flatten().is_some());
    let sync = |incarnation| {
        let home = home.clone();
        async move {
            let epoch = home.state().map.epoch;
            let req = Request::from(ClientRequest::SyncPartition { incarnation });
            home.dispatch(None, epoch, Caller::root(), req).await
        }
    };
    assert_eq!(sync(incarnation).await, Ok(Response::Unit));
    assert!(
        matches!(sync(incarnation ^ 1).await, Err(WireError::Io(_))),
        "a barrier for another incarnation's changes must not vouch for them"
    );
    // A retry of the change (same number) answers its recorded outcome, durable.
    let again = send_once_as(&home, 1, create("/v"), true).await;
    assert!(
        matches!(again, Ok(Response::Changed { inode: Some(_), .. })),
        "{again:?}"
    );
    // Not every change is answered early: one that spans partitions is durable.
    let mkdir = ClientRequest::Mkdir {
        path: "/dir".into(),
        mode: 0o755,
        shards: 0,
    };
    let made = send_once_as(&home, 2, mkdir, true).await;
    assert!(
        !matches!(made, Ok(Response::Applied { .. })),
        "a mkdir answered before its intent was durable: {made:?}"
    );
}

/// A server that left the cluster and is still running sees its id given to a new
/// server at another address (ids are reused): it takes no such map, so it never serves
/// the new server's partitions.
#[tokio::test(start_paused = true)]
async fn a_map_giving_this_servers_id_to_another_address_is_not_taken() {
    let h = host(Arc::new(Silent::default()));
    reconcile(&h).await;
    let mut next = map(&h);
    next.epoch += 1;
    for n in &mut next.nodes {
        if n.id == NodeId(1) {
            n.addr = "sim-9".into();
        }
    }
    let e = h.install_map(next.clone()).await.err();
    assert!(
        e.as_ref().is_some_and(|e| e.to_string().contains("sim-9")),
        "{e:?}"
    );
    assert_eq!(map(&h).epoch, next.epoch - 1, "the old map stays");
    // A map listing it where it is, is taken.
    let mut same = map(&h);
    same.epoch += 2;
    h.install_map(same)
        .await
        .unwrap_or_else(|e| panic!("install: {e}"));
}

/// ARCHITECTURE.md "Undecided directory objects": a create racing a mkdir whose object
/// is made but whose entry is still pending lands nowhere (it waits for the entry, then
/// `Busy`), so the mkdir's undo finds the object empty and removes it (before, the undo
/// was refused `NotEmpty` forever: simulation seed 186 with `--trash`). An object whose
/// entry holds no such directory answers `NotFound`; one whose mkdir committed while its
/// confirm was lost takes the create once the entry is asked, and is then confirmed.
#[tokio::test(start_paused = true)]
async fn a_create_racing_an_undecided_mkdir_lands_only_once_the_mkdir_commits() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let owner = h
        .partition(h.state().ring.owner_of_dir("/x"))
        .unwrap_or_else(|| panic!("the object's home is served here"));
    let undecided = |p: &Partition| p.store.dir("/x").ok().flatten().map(|r| r.undecided);
    let file = |p: &Partition| p.store.entry("/x", "f").ok().flatten().is_some();
    // 1. Made, then decided undone (its coordinator's call timed out): the create waits
    // for the entry (recovery may undo the mkdir meanwhile), and lands nowhere. (A
    // client's create also waits in its permission check, which looks the parent up; the
    // mark holds where nothing looked first: the server's own moves into the trash, a
    // check answered before an rmdir and a new mkdir of the same name.)
    let (txid, ino) = mkdir_begun(&home).await;
    owner
        .create_dir_object("/x", ino, (0, true), None)
        .await
        .unwrap_or_else(|e| panic!("object: {e}"));
    assert_eq!(undecided(&owner), Some(true));
    home.applier
        .run(Mutation::Decide {
            txid,
            decision: crate::state::intent::Decision::Abort,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let raced = from_client(&owner, create("/x/f")).await;
    assert!(
        matches!(raced, Err(WireError::Busy | WireError::NotFound)),
        "a create in a directory whose mkdir is undone: {raced:?}"
    );
    assert!(!file(&owner), "a create landed in an undecided directory");
    home.recover(&std::collections::BTreeSet::new(), true).await;
    assert!(!object(&h), "the undo did not remove the object");
    assert!(home.store.intent(txid).ok().flatten().is_none());
    // 2. An object its entry does not name (an undo that has not reached it yet).
    owner
        .create_dir_object("/x", ino, (0, true), None)
        .await
        .unwrap_or_else(|e| panic!("object: {e}"));
    assert_eq!(
        from_client(&owner, create("/x/f")).await,
        Err(WireError::NotFound)
    );
    assert!(!file(&owner));
    owner
        .remove_dir_object("/x", ino, &crate::commit::Context::background())
        .await
        .unwrap_or_else(|e| panic!("remove: {e}"));
    // 3. Committed, its confirm lost: the create asks, then lands.
    let (txid, ino) = mkdir_begun(&home).await;
    owner
        .create_dir_object("/x", ino, (0, true), None)
        .await
        .unwrap_or_else(|e| panic!("object: {e}"));
    home.applier
        .run(Mutation::ResolveEntry {
            dir: "/".into(),
            name: "x".into(),
            txid,
            commit: true,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(visible(&home));
    let made = from_client(&owner, create("/x/f")).await;
    assert!(made.is_ok(), "create after the commit: {made:?}");
    assert!(file(&owner));
    assert_eq!(undecided(&owner), Some(false));
}

/// A setattr folded into a create (`requests::Create::then`, protocol 43) lands on the new
/// file with it; one the partition refuses (here meant for another inode) leaves the
/// create applied, bytes and all, and answers the setattr's error, as when it was sent
/// alone after the create.
#[tokio::test(start_paused = true)]
async fn a_setattr_folded_into_a_create_is_applied_with_it_or_refused_alone() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let reserve = ClientRequest::ReserveIds { count: 16 };
    let Ok(Response::Ids { first, .. }) = send_once(&home, 1, reserve).await else {
        panic!("numbers reserved");
    };
    let folded = |path: &str, ino: u64, of: Option<u64>| {
        ClientRequest::Create(myriad_proto::requests::Create {
            path: path.into(),
            mode: 0o644,
            exclusive: true,
            data: b"tar".to_vec(),
            durable: true,
            ino: Some(myriad_proto::InodeId(ino)),
            data_at: None,
            then: Some(myriad_proto::requests::SetAfter {
                set: myriad_proto::SetAttr {
                    mode: Some(0o600),
                    mtime_ns: Some(5),
                    of: of.map(myriad_proto::InodeId),
                    ..myriad_proto::SetAttr::default()
                },
                at_ns: 0,
            }),
        })
    };
    let stat = |path: &str| ClientRequest::Stat { path: path.into() };
    match send_once(&home, 2, folded("/a", first.0, Some(first.0))).await {
        Ok(Response::Changed { inode: Some(i), .. }) => {
            assert_eq!((i.mode & 0o7777, i.mtime_ns, i.size), (0o600, 5, 3));
        }
        other => panic!("a create with its setattr: {other:?}"),
    }
    let refused = send_once(&home, 3, folded("/b", first.0 + 1, Some(first.0))).await;
    assert_eq!(refused, Err(WireError::Stale), "meant for another inode");
    match from_client(&home, stat("/b")).await {
        Ok(Response::Attr(i)) => {
            assert_eq!((i.ino.0, i.mode & 0o7777, i.size), (first.0 + 1, 0o644, 3));
        }
        other => panic!("the create applied alone: {other:?}"),
    }
}

/// Writes answered behind folded into a create (`Create::data_at`) take off the set-id
/// bits a write by their caller takes off, as the client showed them (open(O_CREAT,
/// 04755) then a write, by a user: 0755).
#[tokio::test(start_paused = true)]
async fn writes_folded_into_a_create_take_its_set_id_bits_off() {
    let h = host(Arc::new(Silent::default()));
    let home = root_home(&h).await;
    let open_root = ClientRequest::SetAttr {
        path: "/".into(),
        set: myriad_proto::SetAttr {
            mode: Some(0o777),
            ..myriad_proto::SetAttr::default()
        },
    };
    assert!(send_once(&home, 1, open_root).await.is_ok());
    let user = Caller {
        uid: 5,
        gid: 5,
        groups: Vec::new(),
    };
    let create = |path: &str, data_at: Option<i64>| {
        ClientRequest::Create(myriad_proto::requests::Create {
            path: path.into(),
            mode: 0o4755,
            exclusive: true,
            data: b"x".to_vec(),
            durable: true,
            ino: None,
            data_at,
            then: None,
        })
    };
    let epoch = home.state().map.epoch;
    for (path, data_at, mode) in [("/written", Some(7), 0o755), ("/made", None, 0o4755)] {
        let req = Request::Client(create(path, data_at).into());
        match home.dispatch(None, epoch, user.clone(), req).await {
            Ok(Response::Changed { inode: Some(i), .. }) => {
                assert_eq!(i.mode & 0o7777, mode, "{path}");
            }
            other => panic!("{path}: {other:?}"),
        }
    }
}
