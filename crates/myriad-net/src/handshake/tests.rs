//! Version negotiation against peers of protocol 29 (docs/upgrades.md), over real sockets:
//! a client of this build connects to a server that behaves as 29's did (it refused any
//! version but its own), and a client of 29 connects to this build's server. The 29 side
//! speaks the frozen layouts of its hello and reply.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use myriad_proto::auth::{Keyring, Nonce, Proof, proofs_equal};
use myriad_proto::codec::{decode, encode};
use myriad_proto::{Auth, AuthReply, NodeId, PROTOCOL_VERSION, PeerKind};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite};

use super::*;
use crate::frame::frame_codec;

/// Protocol 29's hello and reply, field for field.
#[derive(Serialize, Deserialize)]
struct HelloV29 {
    magic: u32,
    version: u16,
    peer: PeerKind,
    key_id: Option<myriad_proto::auth::KeyId>,
    nonce: Nonce,
    zone: String,
}

#[derive(Serialize, Deserialize)]
struct HelloReplyV29 {
    version: u16,
    node_id: NodeId,
    epoch: u64,
    refused: Option<String>,
    nonce: Nonce,
    proof: Proof,
}

fn keys() -> Keyring {
    Keyring::from_secret(&[7u8; 32])
}

fn halves(s: TcpStream) -> (Reader, Writer) {
    let (r, w) = s.into_split();
    (
        FramedRead::new(r, frame_codec()),
        FramedWrite::new(w, frame_codec()),
    )
}

/// One connection handled as a server of 29 did: any other version refused (naming its
/// own), else the handshake done. Returns the version the client offered.
async fn serve_as_29(s: TcpStream, keys: &Keyring) -> u16 {
    let (mut r, mut w) = halves(s);
    let hello_bytes = recv(&mut r).await.unwrap_or_else(|e| panic!("{e}"));
    let hello: HelloV29 = decode(&hello_bytes).unwrap_or_else(|e| panic!("{e}"));
    let key = keys.connect_key().unwrap_or_else(|| panic!("a key"));
    let nonce_s = [4u8; 32];
    let ok = hello.version == 29;
    let reply = HelloReplyV29 {
        version: 29,
        node_id: NodeId(5),
        epoch: 11,
        refused: (!ok).then(|| {
            format!(
                "protocol version {} not supported (this server speaks 29)",
                hello.version
            )
        }),
        nonce: nonce_s,
        proof: if ok {
            key.server_proof(&hello_bytes, &nonce_s, NodeId(5), 11)
        } else {
            [0; 32]
        },
    };
    let reply_bytes = encode(&reply).unwrap_or_default();
    w.send(bytes::Bytes::from(reply_bytes.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    if ok {
        let auth: Auth = decode(&recv(&mut r).await.unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(proofs_equal(
            &auth.proof,
            &key.client_proof(&hello_bytes, &reply_bytes)
        ));
        send(&mut w, &AuthReply { refused: None })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Held open while the client looks at the connection.
        let _ = tokio::time::timeout(Duration::from_secs(2), r.next()).await;
    }
    hello.version
}

/// This build's server handling one connection (node 1, epoch 3), and a client's socket
/// to it: (its address, the server's outcome, the socket's halves).
async fn one_served_connection(
    k: &Keyring,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<Result<Peer, Refusal>>,
    (Reader, Writer),
) {
    served_with_floor(k, 0).await
}

/// `one_served_connection` by a server of a cluster whose protocol floor is `floor`.
async fn served_with_floor(
    k: &Keyring,
    floor: u16,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<Result<Peer, Refusal>>,
    (Reader, Writer),
) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let k = k.clone();
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
        let (mut r, mut w) = halves(s);
        server(
            &mut r,
            &mut w,
            &k,
            (NodeId(1), 3),
            (None, floor),
            Duration::from_secs(5),
        )
        .await
    });
    let s = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (addr, server, halves(s))
}

#[tokio::test]
async fn a_client_of_this_build_speaks_29_to_a_server_of_29() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let server = tokio::spawn(async move {
        let k = keys();
        let mut offered = Vec::new();
        for _ in 0..2 {
            let (s, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
            offered.push(serve_as_29(s, &k).await);
        }
        offered
    });
    let conn =
        crate::RpcConn::connect(&addr, PeerKind::Client, "", &keys(), Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((conn.version, conn.peer_newest), (29, 29));
    assert_eq!(conn.peer_node_id, NodeId(5));
    drop(conn);
    let offered = server.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(offered, vec![PROTOCOL_VERSION, 29], "refused once, then 29");
}

#[tokio::test]
async fn a_client_of_29_is_served_by_this_build_and_reads_its_reply() {
    let k = keys();
    let (_, server, (mut r, mut w)) = one_served_connection(&k).await;
    let key = k.connect_key().unwrap_or_else(|| panic!("a key"));
    let hello = HelloV29 {
        magic: myriad_proto::MAGIC,
        version: 29,
        peer: PeerKind::Client,
        key_id: Some(key.id()),
        nonce: [3; 32],
        zone: String::new(),
    };
    let hello_bytes = encode(&hello).unwrap_or_default();
    w.send(bytes::Bytes::from(hello_bytes.clone()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let reply_bytes = recv(&mut r).await.unwrap_or_else(|e| panic!("{e}"));
    // The client of 29 reads the reply as its own, and the server proved the key.
    let reply: HelloReplyV29 = decode(&reply_bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((reply.version, reply.refused.as_deref()), (29, None));
    assert!(proofs_equal(
        &reply.proof,
        &key.server_proof(&hello_bytes, &reply.nonce, NodeId(1), 3)
    ));
    send(
        &mut w,
        &Auth {
            proof: key.client_proof(&hello_bytes, &reply_bytes),
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let verdict: AuthReply = decode(&recv(&mut r).await.unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(verdict.refused, None);
    let peer = server
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(peer.version, 29, "the connection speaks 29");
}

#[tokio::test]
async fn versions_that_do_not_meet_are_refused_with_both_ranges() {
    let k = keys();
    let (addr, server, (mut r, mut w)) = one_served_connection(&k).await;
    // A future client that no longer speaks this build's protocol.
    let far = PROTOCOL_VERSION + 5;
    let err = client(
        &addr.to_string(),
        &mut r,
        &mut w,
        (PeerKind::Client, ""),
        &k,
        far,
    )
    .await;
    // It offered `far` down to this build's oldest, so they meet at this build's newest.
    assert!(
        matches!(err, Ok(Shook::Done(h)) if h.version == PROTOCOL_VERSION && h.newest == PROTOCOL_VERSION)
    );
    drop(server);
    let refusal = server_refusal_for(PROTOCOL_VERSION + 1, PROTOCOL_VERSION + 3).await;
    assert!(
        refusal.contains(&format!(
            "{}-{}",
            PROTOCOL_VERSION + 1,
            PROTOCOL_VERSION + 3
        )) && refusal.contains(&format!(
            "{}-{PROTOCOL_VERSION}",
            myriad_proto::PROTOCOL_MIN
        )),
        "{refusal}"
    );
}

/// The reason this build's server gives a hello offering `min..=max`.
async fn server_refusal_for(min: u16, max: u16) -> String {
    let k = keys();
    let (_, task, (mut r, mut w)) = one_served_connection(&k).await;
    let hello = myriad_proto::Hello {
        magic: myriad_proto::MAGIC,
        version: max,
        peer: PeerKind::Client,
        key_id: k.connect_key().map(|key| key.id()),
        nonce: [3; 32],
        zone: String::new(),
        min_version: min,
    };
    send(&mut w, &hello).await.unwrap_or_else(|e| panic!("{e}"));
    let reply = myriad_proto::HelloReply::decode_any(&recv(&mut r).await.unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    let refused = task.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(refused.is_err());
    reply.refused.unwrap_or_default()
}

/// `Pool::link` counts the connections to an address, a closed one as replaced by the
/// next (a client sees a server that restarted by it), and names the live one's protocol.
#[tokio::test]
async fn the_pool_counts_connections_and_a_closed_one_as_replaced() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    // Each connection is served (as 29 did) and then closed by the server.
    let server = tokio::spawn(async move {
        let k = keys();
        let mut served = 0;
        while served < 3 {
            let (s, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
            if serve_as_29(s, &k).await == 29 {
                served += 1;
            }
        }
    });
    let pool = crate::Pool::new(crate::PoolConfig {
        me: PeerKind::Client,
        zone: String::new(),
        keys: std::sync::Arc::new(keys()),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
    });
    let link = |connection, version| crate::Link {
        connection,
        version,
    };
    assert_eq!(pool.link(&addr), link(1, 0), "before the first connection");
    for n in 1..=2 {
        let conn = pool.conn(&addr).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(conn.version, 29);
        // The server closes it; until the client notices, it counts as live.
        for _ in 0..200 {
            if conn.is_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(conn.is_closed(), "connection {n} not seen closed");
        assert_eq!(
            pool.link(&addr),
            link(n + 1, 0),
            "after connection {n} closed"
        );
    }
    drop(server);
}

/// A server that speaks nothing as new as the cluster's protocol floor is refused at its
/// hello, told the floor; a client of the same version is served (it reads nothing the
/// floor guards), and so is a server that speaks the floor.
#[tokio::test]
async fn a_server_below_the_cluster_s_floor_is_refused_naming_it() {
    let k = keys();
    let floor = PROTOCOL_VERSION;
    let old = PROTOCOL_VERSION - 1;
    for (me, offer, refused) in [
        (PeerKind::Server { node_id: NodeId(2) }, old, true),
        (PeerKind::Client, old, false),
        (PeerKind::Server { node_id: NodeId(2) }, floor, false),
    ] {
        let (addr, server, (mut r, mut w)) = served_with_floor(&k, floor).await;
        let shook = client(
            &addr.to_string(),
            &mut r,
            &mut w,
            (me.clone(), ""),
            &k,
            offer,
        )
        .await;
        let outcome = server.await.unwrap_or_else(|e| panic!("{e}"));
        if refused {
            let why = format!("{:?}", shook.err());
            assert!(
                why.contains(&format!("runs protocol {floor} or later")),
                "{me:?}: {why}"
            );
            assert!(outcome.is_err(), "{me:?}");
        } else {
            assert!(
                matches!(shook, Ok(Shook::Done(h)) if h.version == offer),
                "{me:?}"
            );
            assert_eq!(outcome.map(|p| p.version).ok(), Some(offer), "{me:?}");
        }
    }
}
