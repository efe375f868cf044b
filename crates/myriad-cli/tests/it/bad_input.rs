//! Hostile input and untrusted peers (issue 7, SECURITY.md): peers without the cluster's key
//! are refused with a logged reason, tampered, malformed and oversized frames close only
//! their connection, slow and surplus connections are cut, clients cannot send server
//! requests, and root is squashed for client keys when asked.

use myriad_client::NodeId;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use myriad_client::Keyring;
use myriad_proto::auth::{ClusterKey, FrameSeal, TAG_BYTES};
use myriad_proto::codec::{decode, encode};
use myriad_proto::{Auth, AuthReply, Hello, HelloReply, MAGIC, PROTOCOL_VERSION, PeerKind};

use crate::harness::TestCluster;

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = u32::try_from(body.len())
        .unwrap_or(0)
        .to_be_bytes()
        .to_vec();
    f.extend_from_slice(body);
    f
}

fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap_or_else(|e| panic!("{e}"));
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap_or_else(|e| panic!("{e}"));
    body
}

/// True if the server closed the connection (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let _ = s.set_read_timeout(Some(within));
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a reply may come first
            Err(e) => {
                return e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut;
            }
        }
    }
}

fn closed_by_server(s: &mut TcpStream) -> bool {
    closed_within(s, Duration::from_secs(5))
}

fn hello(magic: u32, version: u16, key: Option<&ClusterKey>) -> Hello {
    Hello {
        magic,
        version,
        peer: PeerKind::Client,
        key_id: key.map(ClusterKey::id),
        nonce: [5; 32],
        zone: String::new(),
        // Exactly this version: a test of one version's refusal.
        min_version: version,
    }
}

/// A raw connection that has done the handshake with `key`: (stream, c2s tagger).
fn authenticated(addr: &str, key: &ClusterKey) -> (TcpStream, FrameSeal) {
    try_authenticated(addr, key).unwrap_or_else(|why| panic!("refused: {why}"))
}

/// Like `authenticated`, or the server's reason for refusing the hello.
fn try_authenticated(addr: &str, key: &ClusterKey) -> Result<(TcpStream, FrameSeal), String> {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
    let h = hello(MAGIC, PROTOCOL_VERSION, Some(key));
    let hb = encode(&h).unwrap_or_default();
    s.write_all(&frame(&hb)).unwrap_or_else(|e| panic!("{e}"));
    let rb = read_frame(&mut s);
    let reply: HelloReply = decode(&rb).unwrap_or_else(|e| panic!("{e}"));
    if let Some(why) = reply.refused {
        return Err(why);
    }
    let auth = Auth {
        proof: key.client_proof(&hb, &rb),
    };
    s.write_all(&frame(&encode(&auth).unwrap_or_default()))
        .unwrap_or_else(|e| panic!("{e}"));
    let verdict: AuthReply = decode(&read_frame(&mut s)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(verdict.refused, None);
    let (c2s, _) = key.session(&h.nonce, &reply.nonce);
    Ok((s, c2s))
}

fn sealed(seal: &mut FrameSeal, body: &[u8]) -> Vec<u8> {
    let mut f = u32::try_from(body.len() + TAG_BYTES)
        .unwrap_or(0)
        .to_be_bytes()
        .to_vec();
    f.extend_from_slice(&seal.seal(body));
    f
}

/// Asserts that an error (or a refusal) was given and says `what`.
#[track_caller]
fn says<E: std::fmt::Display>(err: Option<E>, what: &str) {
    let text = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains(what),
        "expected an error saying {what:?}, got {text:?}"
    );
}

/// A connection pool proving the client key, as `me`.
fn client_key_pool(tc: &TestCluster, me: PeerKind) -> myriad_net::Pool {
    myriad_net::Pool::new(myriad_net::PoolConfig {
        me,
        zone: String::new(),
        keys: std::sync::Arc::new(tc.client_key()),
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
    })
}

fn key(ring: &Keyring) -> ClusterKey {
    ring.connect_key()
        .cloned()
        .unwrap_or_else(|| panic!("no key"))
}

fn log_of(tc: &TestCluster, node: u32) -> String {
    std::fs::read_to_string(tc.dir.path().join(format!("node-{node}.log"))).unwrap_or_default()
}

/// Waits until node `node`'s log says `what` (logs are written as it happens).
fn logged(tc: &TestCluster, node: u32, what: &str) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if log_of(tc, node).contains(what) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_that_connection() {
    let tc = TestCluster::start(2);
    let addr = tc.map.nodes[0].addr.clone();
    let k = key(&tc.keys());
    let c = tc.client();
    c.mkdir("/ok", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // 1. An oversized length prefix.
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&0xffff_fff0u32.to_be_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        closed_by_server(&mut s),
        "oversized frame must close the connection"
    );

    // 2. Garbage instead of a hello.
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&frame(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(closed_by_server(&mut s));

    // 3. A wrong magic gets a refusal that says why, then the connection closes.
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&frame(
        &encode(&hello(0x1234, PROTOCOL_VERSION, Some(&k))).unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let reply: HelloReply = decode(&read_frame(&mut s)).unwrap_or_else(|e| panic!("{e}"));
    says(reply.refused, "magic");
    assert!(closed_by_server(&mut s));

    // 4. Authenticated, then a well-tagged frame whose body does not decode.
    let (mut s, mut mac) = authenticated(&addr, &k);
    s.write_all(&sealed(
        &mut mac,
        &[
            0x01, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ],
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(closed_by_server(&mut s));

    // 5. Authenticated, then a length over the frame limit.
    let (mut s, _) = authenticated(&addr, &k);
    s.write_all(&(64u32 << 20).to_be_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(closed_by_server(&mut s));

    // 6. A truncated frame then silence: the server must not hang other clients.
    let (mut hung, _) = authenticated(&addr, &k);
    hung.write_all(&100u32.to_be_bytes())
        .unwrap_or_else(|e| panic!("{e}"));

    // 7. A wrong protocol version is refused.
    let mut s2 = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s2.write_all(&frame(
        &encode(&hello(MAGIC, PROTOCOL_VERSION + 1, Some(&k))).unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(closed_by_server(&mut s2));

    // 8. A zone name that is not one (a space, or far too long) is refused.
    for zone in ["a b".to_string(), "z".repeat(1000)] {
        let mut s3 = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
        let mut h = hello(MAGIC, PROTOCOL_VERSION, Some(&k));
        h.zone = zone;
        s3.write_all(&frame(&encode(&h).unwrap_or_default()))
            .unwrap_or_else(|e| panic!("{e}"));
        let reply: HelloReply = decode(&read_frame(&mut s3)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.refused.as_deref(), Some("bad zone name in the hello"));
    }

    // The server is alive and serving everyone else.
    c.create("/ok/after", 0o644, true, b"still here")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.fetch("/ok/after").await.map(|x| x.1).ok().as_deref(),
        Some(&b"still here"[..])
    );
    drop(hung);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_without_the_cluster_key_are_refused_with_a_logged_reason() {
    let tc = TestCluster::start(1);
    let addr = tc.map.nodes[0].addr.clone();
    let c = tc.client();
    c.create("/secret.txt", 0o644, true, b"data")
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // No key at all: refused, with the reason in the reply and in the server's log.
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&frame(
        &encode(&hello(MAGIC, PROTOCOL_VERSION, None)).unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let reply: HelloReply = decode(&read_frame(&mut s)).unwrap_or_else(|e| panic!("{e}"));
    let why = reply.refused.unwrap_or_default();
    assert!(why.contains("authentication required"), "{why}");
    assert_eq!(reply.proof, [0u8; 32], "no proof for an unknown peer");
    assert!(closed_by_server(&mut s));
    assert!(logged(
        &tc,
        1,
        "refused connection: authentication required"
    ));

    // A wrong secret: the client learns why; nothing is read or written.
    let wrong = Keyring::from_secret(&[0x42; 32]);
    let bad = tc.client_with_keys(
        tc.map.clone(),
        Duration::from_secs(3),
        myriad_client::Caller::root(),
        wrong,
    );
    says(bad.fetch("/secret.txt").await.err(), "wrong secret");
    assert!(bad.create("/evil", 0o644, true, b"x").await.is_err());
    assert!(logged(&tc, 1, "the client's key is not this cluster's"));

    // A right key id but a forged proof (a peer replaying another's hello without the key).
    let k = key(&tc.keys());
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&frame(
        &encode(&hello(MAGIC, PROTOCOL_VERSION, Some(&k))).unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let _ = read_frame(&mut s);
    s.write_all(&frame(
        &encode(&Auth { proof: [9; 32] }).unwrap_or_default(),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let verdict: AuthReply = decode(&read_frame(&mut s)).unwrap_or_else(|e| panic!("{e}"));
    says(verdict.refused, "bad proof");
    assert!(closed_by_server(&mut s));

    // A client key may not pose as a server.
    let pool = client_key_pool(&tc, PeerKind::Server { node_id: NodeId(1) });
    says(pool.conn(&addr).await.err(), "cannot act as a server");

    // Nothing of the refused peers got in, and the right key still works.
    assert!(c.stat("/evil").await.is_err());
    assert_eq!(
        c.fetch("/secret.txt").await.map(|x| x.1).ok().as_deref(),
        Some(&b"data"[..])
    );
}

/// A man in the middle flips one bit of the first request after the handshake: the server
/// refuses the frame (closing that connection) and nothing it asked for happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_frames_are_rejected() {
    let tc = TestCluster::start(1);
    let server = tc.map.nodes[0].addr.clone();
    let c = tc.client();
    c.mkdir("/d", 0o777).await.unwrap_or_else(|e| panic!("{e}"));

    // The proxy forwards client->server frames (Hello, Auth, then requests) and flips the
    // last byte of frame number 3, the first request.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let proxy = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    std::thread::spawn(move || {
        let Ok((mut from_client, _)) = listener.accept() else {
            return;
        };
        let Ok(mut to_server) = TcpStream::connect(&server) else {
            return;
        };
        let (Ok(mut back_from), Ok(mut back_to)) = (to_server.try_clone(), from_client.try_clone())
        else {
            return;
        };
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut back_from, &mut back_to);
        });
        for n in 1.. {
            let mut len = [0u8; 4];
            if from_client.read_exact(&mut len).is_err() {
                return;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            if from_client.read_exact(&mut body).is_err() {
                return;
            }
            if n == 3
                && let Some(b) = body.last_mut()
            {
                *b ^= 0x01;
            }
            if to_server.write_all(&len).is_err() || to_server.write_all(&body).is_err() {
                return;
            }
        }
    });
    let mut map = tc.map.clone();
    map.nodes[0].addr = proxy;
    let through = tc.client_with(map, Duration::from_secs(3));
    let r = through.create("/d/tampered", 0o644, true, b"evil").await;
    assert!(r.is_err(), "a tampered request must fail: {r:?}");
    assert!(logged(&tc, 1, "failed its authentication tag"));
    assert!(
        c.stat("/d/tampered").await.is_err(),
        "the tampered request must not have run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_surplus_connections_are_cut_while_others_are_served() {
    let tc = TestCluster::start_with(
        1,
        &[
            "--frame-timeout-secs=2",
            "--handshake-timeout-secs=2",
            "--max-conns-per-addr=6",
        ],
    );
    let addr = tc.map.nodes[0].addr.clone();
    let k = key(&tc.keys());
    let c = tc.client();
    c.mkdir("/busy", 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // A slow loris: a frame of 100 bytes, one byte every 300 ms, after a good handshake.
    let (mut loris, _) = authenticated(&addr, &k);
    // A silent peer that never says hello.
    let mut silent = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    loris
        .write_all(&100u32.to_be_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    let mut cut = false;
    let mut served = 0;
    while start.elapsed() < Duration::from_secs(8) {
        if loris.write_all(&[0]).is_err() {
            cut = true;
            break;
        }
        // Everyone else is served meanwhile.
        c.create(&format!("/busy/f{served}"), 0o644, true, b"x")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        served += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let cut = cut || closed_within(&mut loris, Duration::from_secs(1));
    assert!(cut, "the slow client was not disconnected");
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "cut after {:?}",
        start.elapsed()
    );
    assert!(served >= 3, "others were served meanwhile ({served})");
    assert!(logged(&tc, 1, "slow peer"));
    assert!(closed_within(&mut silent, Duration::from_secs(3)));
    assert!(logged(&tc, 1, "handshake not done within"));

    // Connections per address (limit 6; our client holds one, and a single server may hold
    // one to itself): open more until one is refused, with the reason.
    let mut held = Vec::new();
    let mut refusal = None;
    for _ in 0..6 {
        match try_authenticated(&addr, &k) {
            Ok((s, _)) => held.push(s),
            Err(why) => {
                refusal = Some(why);
                break;
            }
        }
    }
    says(refusal, "too many connections");
    assert!(held.len() >= 4, "refused too early: {}", held.len());
    let extra = tc.client();
    says(extra.stat("/busy").await.err(), "too many connections");
    // The connections already open keep working, and a slot freed is usable again.
    assert!(c.stat("/busy").await.is_ok());
    held.pop();
    let start = Instant::now();
    while extra.stat("/busy").await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "freed slot not reusable"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_keys_cannot_send_server_requests_and_root_is_squashed() {
    let tc = TestCluster::start_with(2, &["--root-squash"]);
    let admin = tc.client_as(
        tc.map.clone(),
        Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    admin
        .mkdir("/d", 0o777)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Root with the cluster secret is root.
    admin
        .create("/d/by-admin", 0o644, true, b"a")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let a = admin
        .stat("/d/by-admin")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((a.uid, a.gid), (0, 0));

    // Root on a client machine (client key) is nobody.
    let root_client = tc.client_with_keys(
        tc.map.clone(),
        Duration::from_secs(10),
        myriad_client::Caller::root(),
        tc.client_key(),
    );
    root_client
        .create("/d/by-client-root", 0o600, true, b"b")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let b = admin
        .stat("/d/by-client-root")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((b.uid, b.gid), (65534, 65534));
    // ... so it cannot read a file only its owner may read.
    admin
        .chmod("/d/by-admin", 0o600)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        root_client.fetch("/d/by-admin").await.err(),
        Some(myriad_proto::FsError::PermissionDenied)
    );

    // Server-to-server requests over a client-key connection are refused, and so is fsck.
    let pool = client_key_pool(&tc, PeerKind::Client);
    let owner = tc.map.ring().owner_of_dir("/d");
    let addr = tc
        .map
        .partition_addr(owner)
        .map(str::to_string)
        .unwrap_or_default();
    for req in [
        myriad_proto::Request::Peer(myriad_proto::PeerRequest::DirFinish {
            path: "/d".into(),
            txid: 1,
            action: myriad_proto::DirAction::Drop {
                keep_blocks_of: None,
            },
        }),
        myriad_proto::Request::Admin(myriad_proto::AdminRequest::FsckReplica),
        myriad_proto::Request::Admin(myriad_proto::AdminRequest::ResetCounters),
        myriad_proto::Request::Peer(myriad_proto::PeerRequest::Lease),
        myriad_proto::Request::Replica(myriad_proto::ReplicaRequest::ReplicaReset),
    ] {
        let r = pool
            .call(
                &addr,
                tc.map.epoch,
                myriad_proto::Endpoints::to(owner),
                &myriad_proto::Caller::root(),
                &req,
            )
            .await;
        assert_eq!(r.err(), Some(myriad_proto::WireError::PermissionDenied));
    }
    assert!(
        admin.readdir("/d").await.is_ok(),
        "the directory is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_clients_reconnect() {
    let tc = TestCluster::start_with(1, &["--idle-timeout-secs=1"]);
    let c = tc.client();
    c.mkdir("/i", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(logged(&tc, 1, "closing idle connection"));
    c.create("/i/after-idle", 0o644, true, b"z")
        .await
        .unwrap_or_else(|e| panic!("after the idle close: {e}"));
    assert!(c.stat("/i/after-idle").await.is_ok());
}

#[test]
fn the_cli_refuses_missing_and_readable_key_files() {
    use std::os::unix::fs::PermissionsExt;
    let tc = TestCluster::start(1);
    let run = |key: &std::path::Path| {
        std::process::Command::new(crate::harness::BIN)
            .arg("--cluster")
            .arg(tc.map_file())
            .arg("--secret-file")
            .arg(key)
            .args(["ls", "/"])
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let missing = run(&tc.dir.path().join("nope.key"));
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read key file"));

    let client_key = tc.dir.path().join("client.key");
    assert!(run(&client_key).status.success(), "the client key works");
    std::fs::set_permissions(&client_key, std::fs::Permissions::from_mode(0o644))
        .unwrap_or_else(|e| panic!("{e}"));
    let open = run(&client_key);
    assert_eq!(open.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&open.stderr).contains("chmod 600"));
    let mode = std::fs::metadata(tc.dir.path().join("cluster.secret"))
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    assert_eq!(mode, 0o600, "cluster up makes its secret 0600");
}

/// Everything a client and server 1 of a one-server cluster say to each other passes a
/// recording relay on loopback: the recording holds none of a file's contents, written or
/// read back (frames are encrypted, docs/write-path.md part 4), though it holds at least
/// as many bytes as went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_carries_no_file_contents_in_the_clear() {
    let tc = TestCluster::start(1);
    let server = tc.map.nodes[0].addr.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let relay = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let recording = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let (Ok(from_client), Ok(to_server)) = (conn, TcpStream::connect(&server)) else {
                return;
            };
            for (mut from, mut to) in [
                (from_client.try_clone(), to_server.try_clone()),
                (to_server.try_clone(), from_client.try_clone()),
            ]
            .into_iter()
            .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
            {
                let rec = recording.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from.read(&mut buf) {
                        // Recorded before it is passed on: once the client has the
                        // answer, the recording holds it (else a loaded machine lets the
                        // test look first).
                        rec.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .extend_from_slice(&buf[..n]);
                        if n == 0 || to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    let mut map = tc.map.clone();
    map.nodes[0].addr = relay;
    let c = tc.client_with(map, Duration::from_secs(10));
    let secret: Vec<u8> = b"Contents only their owner may read. "
        .iter()
        .copied()
        .cycle()
        .take(100_000)
        .collect();
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    c.create("/d/small", 0o644, true, &secret[..3000])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.create("/d/big", 0o644, true, &secret)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let back = c.read_all("/d/big").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, secret);
    let wire = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        wire.len() >= 2 * secret.len(),
        "the relay saw {} bytes: the traffic did not pass it",
        wire.len()
    );
    let needle = &secret[..16];
    assert!(
        !wire.windows(needle.len()).any(|w| w == needle),
        "file contents went over the wire in the clear"
    );
}
