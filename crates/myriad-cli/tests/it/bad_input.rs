//! Malformed and hostile input closes only the offending connection; the server keeps serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use myriad_proto::codec::encode;
use myriad_proto::{Hello, HelloReply, MAGIC, PROTOCOL_VERSION, PeerKind};

use crate::harness::TestCluster;

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = u32::try_from(body.len())
        .unwrap_or(0)
        .to_be_bytes()
        .to_vec();
    f.extend_from_slice(body);
    f
}

/// True if the server closed the connection (EOF or reset) within 5 s.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a hello reply may come first
            Err(e) => {
                return e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut;
            }
        }
    }
}

fn hello(magic: u32, version: u16) -> Vec<u8> {
    frame(
        &encode(&Hello {
            magic,
            version,
            peer: PeerKind::Client,
        })
        .unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_only_that_connection() {
    let tc = TestCluster::start(2);
    let addr = tc.map.nodes[0].addr.clone();
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
    s.write_all(&hello(0x1234, PROTOCOL_VERSION))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap_or_else(|e| panic!("{e}"));
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap_or_else(|e| panic!("{e}"));
    let reply: HelloReply = myriad_proto::codec::decode(&body).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        reply.refused.as_deref().unwrap_or("").contains("magic"),
        "{reply:?}"
    );
    assert!(closed_by_server(&mut s));

    // 4. A good hello, then a request frame that does not decode.
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&hello(MAGIC, PROTOCOL_VERSION))
        .unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&frame(&[
        0x01, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
    ]))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(closed_by_server(&mut s));

    // 5. A truncated frame then silence: the server must not hang other clients.
    let mut s = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&hello(MAGIC, PROTOCOL_VERSION))
        .unwrap_or_else(|e| panic!("{e}"));
    s.write_all(&100u32.to_be_bytes())
        .unwrap_or_else(|e| panic!("{e}"));

    // 6. A wrong protocol version is refused.
    let mut s2 = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    s2.write_all(&hello(MAGIC, PROTOCOL_VERSION + 1))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(closed_by_server(&mut s2));

    // The server is alive and serving everyone else.
    c.create("/ok/after", 0o644, true, b"still here")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.fetch("/ok/after").await.map(|x| x.1).ok().as_deref(),
        Some(&b"still here"[..])
    );
    drop(s);
}

/// The internal server-to-server protocol is refused on client connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_send_server_requests() {
    let tc = TestCluster::start(2);
    let c = tc.client();
    c.mkdir("/d", 0o755).await.unwrap_or_else(|e| panic!("{e}"));
    let pool = myriad_net::Pool::new(myriad_net::PoolConfig {
        me: PeerKind::Client,
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
    });
    let owner = tc.map.ring().owner_of_dir("/d");
    let addr = tc
        .map
        .partition_addr(owner)
        .map(str::to_string)
        .unwrap_or_default();
    let drop_dir = myriad_proto::Request::DirFinish {
        path: "/d".into(),
        txid: 1,
        action: myriad_proto::DirAction::Drop {
            keep_blocks_of: None,
        },
    };
    let r = pool
        .call(
            &addr,
            tc.map.epoch,
            myriad_proto::Endpoints::to(owner),
            &myriad_proto::Caller::root(),
            &drop_dir,
        )
        .await;
    assert_eq!(r.err(), Some(myriad_proto::FsError::PermissionDenied));
    assert!(c.readdir("/d").await.is_ok(), "the directory is untouched");
}
