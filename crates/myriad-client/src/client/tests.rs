//! The client's request loop against servers that keep sending it elsewhere (a transport
//! that answers as a confused cluster would): routing signals never reach the caller.

use std::sync::atomic::{AtomicU32, Ordering};

use futures::future::BoxFuture;
use myriad_placement::ClusterMap;
use myriad_proto::auth::Keyring;
use myriad_proto::{Caller, Endpoints, ErrorKind, Request, ServerRequest, WireError};

use super::*;

/// The servers of a test, scripted: each request is answered at once with what the
/// function says of it and of the caller it carries.
struct Scripted<F>(F);

impl<F> Transport for Scripted<F>
where
    F: Fn(&Caller, &Request) -> Result<Response, WireError> + Send + Sync + 'static,
{
    fn call_with_timeout<'a>(
        &'a self,
        _addr: &'a str,
        _epoch: u64,
        _ends: Endpoints,
        caller: &'a Caller,
        req: &'a Request,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Response, WireError>> {
        let answer = (self.0)(caller, req);
        Box::pin(async move { answer })
    }
}

/// A client of two servers answering as `answer` says, acting for root, whose requests
/// give up after `timeout`.
fn scripted<F>(timeout: Duration, answer: F) -> Client
where
    F: Fn(&Caller, &Request) -> Result<Response, WireError> + Send + Sync + 'static,
{
    let map = ClusterMap::build(1, &["a:1".to_string(), "b:1".to_string()], 1, 2);
    let mut config = ClientConfig::new(map, Caller::root(), Keyring::from_secret(&[3u8; 32]));
    config.request_timeout = timeout;
    Client::with_transport(config, Arc::new(Scripted(answer))).unwrap_or_else(|e| panic!("{e}"))
}

/// A counter shared with a script.
fn counter() -> (Arc<AtomicU32>, Arc<AtomicU32>) {
    let c = Arc::new(AtomicU32::new(0));
    (c.clone(), c)
}

/// Answers every request with `answer` (and a map push with a redirect), counting them.
fn client(answer: WireError) -> (Client, Arc<AtomicU32>) {
    let (calls, counted) = counter();
    let c = scripted(Duration::from_millis(300), move |_, req| {
        counted.fetch_add(1, Ordering::SeqCst);
        Err(match req {
            Request::Server(ServerRequest::InstallMap(m)) => WireError::Redirect(m.clone()),
            _ => answer.clone(),
        })
    });
    (c, calls)
}

#[tokio::test(start_paused = true)]
async fn routing_signals_never_reach_the_caller() {
    let same_map = ClusterMap::build(1, &["a:1".to_string(), "b:1".to_string()], 1, 2);
    for answer in [
        WireError::Redirect(Box::new(same_map)),
        WireError::MapTooOld(7),
        WireError::WrongShard {
            dir: "/".into(),
            map: None,
        },
    ] {
        let (c, calls) = client(answer.clone());
        let got = c.stat("/x").await;
        let Err(e) = got else {
            panic!("{answer:?}: a stat answered by a confused cluster succeeded");
        };
        // The caller's error type has no routing signal (`FsError`, not `WireError`):
        // what it gets says "try again" or that the two ends do not understand each other.
        assert_ne!(e.kind(), ErrorKind::Posix, "{answer:?} became {e:?}");
        assert!(
            calls.load(Ordering::SeqCst) < 200,
            "{answer:?}: {} requests for one stat",
            calls.load(Ordering::SeqCst)
        );
    }
}

/// A server that follows a pushed map but whose partition takes it up a while later is
/// waited for within the request's deadline (five retries at once once failed a request
/// on a loaded machine with "keeps an old cluster map").
#[tokio::test(start_paused = true)]
async fn a_server_slow_to_take_up_a_pushed_map_is_waited_for() {
    // `MapTooOld` to the first 12 requests (its partitions still take up the map it was
    // pushed), then `NotFound`; a map push is answered at once.
    let (calls, counted) = counter();
    let c = scripted(Duration::from_secs(2), move |_, req| match req {
        Request::Server(ServerRequest::InstallMap(_)) => Ok(Response::Unit),
        _ if counted.fetch_add(1, Ordering::SeqCst) < 12 => Err(WireError::MapTooOld(1)),
        _ => Err(WireError::NotFound),
    });
    let got = c.stat("/x").await;
    assert!(
        matches!(got, Err(FsError::NotFound)),
        "the answer after the lag, not {got:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 13);
}

/// Never answers anything: a host gone, whose connects get no SYN back.
struct Gone;

impl Transport for Gone {
    fn call_with_timeout<'a>(
        &'a self,
        _addr: &'a str,
        _epoch: u64,
        _ends: Endpoints,
        _caller: &'a Caller,
        _req: &'a Request,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<Response, WireError>> {
        Box::pin(std::future::pending())
    }
}

/// Asking a gone host for the map gives up within `MAP_ASK_TIMEOUT` even if the transport
/// does not (its connect alone took the connect timeout: a write after a failover waited
/// 4 s), and a server the map has down is asked last.
#[tokio::test(start_paused = true)]
async fn asking_a_gone_host_for_the_map_is_bounded_and_down_servers_come_last() {
    let addrs = ["a:1".to_string(), "b:1".to_string(), "c:1".to_string()];
    let map = ClusterMap::build(1, &addrs, 1, 2);
    let config = ClientConfig::new(
        map.clone(),
        Caller::root(),
        Keyring::from_secret(&[3u8; 32]),
    );
    let c = Client::with_transport(config, Arc::new(Gone)).unwrap_or_else(|e| panic!("{e}"));
    let asked = tokio::time::timeout(MAP_ASK_TIMEOUT * 2, c.ask_map("a:1", map.epoch)).await;
    assert!(matches!(asked, Ok(None)), "not bounded: {asked:?}");
    let first = map.nodes[0].id;
    let down = map.mark_down(first).unwrap_or_else(|| panic!("up"));
    assert_eq!(Client::map_askers(&down), vec!["b:1", "c:1", "a:1"]);
    assert_eq!(Client::map_askers(&map), vec!["a:1", "b:1", "c:1"]);
}

/// The shard map a recovery of held changes asks for on the way is asked as part of that
/// recovery: asked as any other request, it would first recover the same partition's held
/// changes and wait for the very recovery it is part of, for ever.
#[tokio::test(start_paused = true)]
async fn a_recovery_that_needs_a_shard_map_does_not_wait_for_itself() {
    // A primary that lost the changes it answered (its barrier answers `Io`) and sends the
    // first one sent again to another shard of its directory, whose home does not know
    // the directory's shard map (`NotFound`).
    let (resent, resends) = counter();
    let (shard_maps_asked, asks) = counter();
    let c = scripted(Duration::from_secs(5), move |_, req| match req {
        Request::Client(Envelope::Alone(ClientRequest::SyncPartition { .. })) => {
            Err(WireError::Io("that incarnation is gone".into()))
        }
        Request::Client(Envelope::Resend { .. }) if resends.fetch_add(1, Ordering::SeqCst) == 0 => {
            Err(WireError::WrongShard {
                dir: "/d".into(),
                map: None,
            })
        }
        Request::Client(Envelope::Alone(ClientRequest::GetShardMap { .. })) => {
            asks.fetch_add(1, Ordering::SeqCst);
            Err(WireError::NotFound)
        }
        _ => Ok(Response::Unit),
    });
    let route = Route::Entry("/d/x".to_string());
    let pid = c.partition_for(&c.st(), &route);
    assert_eq!(
        pid,
        c.st().ring.owner_of_dir("/d"),
        "the directory's home holds the name"
    );
    let id = OnceId {
        client: 9,
        seq: 1,
        low: 1,
    };
    let unlink = ClientRequest::Unlink {
        path: "/d/x".into(),
    };
    c.hold((pid, 7), ("a:1", 1), &route, id, unlink);
    c.held_suspect(pid);
    let recovered = tokio::time::timeout(Duration::from_secs(60), c.recover(pid)).await;
    assert!(
        matches!(recovered, Ok(Ok(()))),
        "the recovery did not finish: {recovered:?}"
    );
    assert_eq!(
        resent.load(Ordering::SeqCst),
        2,
        "sent again after the shard map"
    );
    assert_eq!(shard_maps_asked.load(Ordering::SeqCst), 1);
    assert!(c.held.lock().parts.is_empty(), "the change is still held");
    assert!(c.held.lock().lost.is_none(), "nothing was lost");
}

/// A handle acts for the caller it was made for, side by side with others sharing the same
/// client, and `as_itself` for the configured one: the identity is the handle's, not the
/// task's.
#[tokio::test]
async fn each_handle_sends_the_caller_it_acts_for() {
    // `NotFound` to everything, keeping the caller each request carried.
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let c = scripted(DEFAULT_REQUEST_TIMEOUT, move |caller, _| {
        kept.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(caller.uid);
        Err(WireError::NotFound)
    });
    let user = |uid| Caller {
        uid,
        gid: uid,
        groups: Vec::new(),
    };
    let took = || {
        let mut seen: Vec<u32> = std::mem::take(
            &mut *seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        seen.sort_unstable();
        seen.dedup();
        seen
    };
    let (alice, bob) = (c.for_caller(user(1001)), c.for_caller(user(1002)));
    let _ = alice.stat("/a").await;
    assert_eq!(took(), [1001]);
    let (a, b) = tokio::join!(alice.stat("/a"), bob.stat("/b"));
    assert!(matches!(
        (a, b),
        (Err(FsError::NotFound), Err(FsError::NotFound))
    ));
    assert_eq!(
        took(),
        [1001, 1002],
        "each handle's own caller, side by side"
    );
    let _ = c.stat("/c").await;
    assert_eq!(took(), [0], "the configured caller");
    let _ = alice.as_itself().stat("/d").await;
    assert_eq!(took(), [0], "as itself: the configured caller");
}
