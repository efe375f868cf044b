//! The mount's write buffer through its seam to the servers: a client over a transport that
//! fails when told to (fault injection) and otherwise takes writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use myriad_client::{ClientConfig, ClusterMap, FileHandle, Keyring, Transport};
use myriad_proto::{
    Caller, ClientRequest, Endpoints, Envelope, Request, Response, SentOnce, WireError,
};

use super::*;
use crate::handles::OpenFile;

const INO: u64 = 5;

/// The servers: writes land (recorded) unless `fail` holds an error for the next one.
#[derive(Default)]
struct Servers {
    fail: Mutex<Option<WireError>>,
    writes: Mutex<Vec<(u64, Vec<u8>)>>,
    /// The uid each write came as.
    write_uids: Mutex<Vec<u32>>,
    /// When set, a write waits at it (a send caught in flight).
    gate: Mutex<Option<Arc<Gate>>>,
}

/// A write says it `reached` the servers, then waits until told to `go` on.
#[derive(Default)]
struct Gate {
    reached: tokio::sync::Notify,
    go: tokio::sync::Notify,
}

impl Transport for Servers {
    fn call_with_timeout<'a>(
        &'a self,
        _addr: &'a str,
        _epoch: u64,
        _ends: Endpoints,
        caller: &'a Caller,
        req: &'a Request,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Response, WireError>> + Send + 'a>> {
        Box::pin(async move {
            if let Some(e) = self.fail.lock().map(|mut f| f.take()).ok().flatten() {
                return Err(e);
            }
            // Changes come sent once (their retries carry the same id).
            let req = match req {
                Request::Client(Envelope::Once(SentOnce { request, .. })) => request,
                Request::Client(Envelope::Alone(c)) => c,
                other => return Err(WireError::NotSupported(format!("{other:?}"))),
            };
            match req {
                ClientRequest::Write(myriad_proto::requests::Write { offset, data, .. }) => {
                    let gate = self.gate.lock().ok().and_then(|g| g.clone());
                    if let Some(gate) = gate {
                        gate.reached.notify_one();
                        gate.go.notified().await;
                    }
                    if let Ok(mut w) = self.writes.lock() {
                        w.push((*offset, data.clone()));
                    }
                    if let Ok(mut w) = self.write_uids.lock() {
                        w.push(caller.uid);
                    }
                    Ok(Response::Attr(Inode {
                        ino: InodeId(INO),
                        size: offset + data.len() as u64,
                        ..placeholder()
                    }))
                }
                other => Err(WireError::NotSupported(format!("{other:?}"))),
            }
        })
    }
}

fn mount_with_open_file(servers: Arc<Servers>) -> (Mount, u64) {
    mount_with_file_opened_by(servers, Caller::root())
}

fn mount_with_file_opened_by(servers: Arc<Servers>, opener: Caller) -> (Mount, u64) {
    let map = ClusterMap::build(1, &["s1".to_string()], 1, 1);
    let config = ClientConfig::new(map, Caller::root(), Keyring::from_secret(&[1u8; 32]));
    let client = Client::with_transport(config, servers).unwrap_or_else(|e| panic!("client: {e}"));
    let inner = Mount::with_top(
        client,
        FsConfig {
            entry_ttl: Duration::from_secs(1),
            attr_ttl: Duration::from_secs(1),
            negative_ttl: Duration::ZERO,
            writeback_cache: false,
            xattrs: false,
            sync_close: false,
            leases: false,
            write_behind: false,
            zero_message_opens: false,
        },
        "/",
        myriad_proto::ROOT_INO,
    );
    let file = FileHandle {
        path: "/f".into(),
        inode: Inode {
            ino: InodeId(INO),
            ..placeholder()
        },
        opened: true,
    };
    let fh = inner.handles.open(OpenFile::new(file, opener, None));
    (inner, fh)
}

#[tokio::test]
async fn buffered_writes_a_failed_send_may_still_deliver_stay_buffered() {
    let servers = Arc::new(Servers::default());
    let (inner, fh) = mount_with_open_file(servers.clone());
    inner
        .write(fh, 0, b"abc".to_vec())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    assert!(inner.handles.has_unsent(InodeId(INO)));
    // A reader's flush meets an unreachable server: the reader fails, the bytes stay.
    *servers.fail.lock().unwrap_or_else(|p| p.into_inner()) =
        Some(WireError::Unavailable("down".into()));
    let r = inner.flush_ino(InodeId(INO)).await;
    assert!(
        matches!(r, Err(FsError::Unavailable(_))),
        "a flush that sent nothing succeeded: {r:?}"
    );
    assert!(
        inner.handles.has_unsent(InodeId(INO)),
        "the unsent bytes were dropped"
    );
    // The next flush delivers them, and the writer's close reports no error.
    inner
        .flush_ino(InodeId(INO))
        .await
        .unwrap_or_else(|e| panic!("flush: {e}"));
    assert_eq!(
        *servers.writes.lock().unwrap_or_else(|p| p.into_inner()),
        vec![(0, b"abc".to_vec())]
    );
    inner
        .flush(fh)
        .await
        .unwrap_or_else(|e| panic!("close: {e}"));
}

#[tokio::test]
async fn buffered_writes_refused_for_good_are_the_writers_error() {
    let servers = Arc::new(Servers::default());
    let (inner, fh) = mount_with_open_file(servers.clone());
    inner
        .write(fh, 0, b"abc".to_vec())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    *servers.fail.lock().unwrap_or_else(|p| p.into_inner()) = Some(WireError::NoSpace);
    assert_eq!(inner.flush_ino(InodeId(INO)).await, Err(FsError::NoSpace));
    assert!(!inner.handles.has_unsent(InodeId(INO)));
    // The writer hears it at its next call.
    assert_eq!(inner.flush(fh).await, Err(FsError::NoSpace));
}

#[tokio::test]
async fn buffered_writes_go_out_as_the_opener_whoever_flushes_them() {
    // Found by fsx under full-suite load: bytes buffered by root's descriptor were sent by
    // a request of another identity, refused (EACCES) and dropped for good.
    let servers = Arc::new(Servers::default());
    let owner = Caller {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    };
    let other = Caller {
        uid: 1001,
        gid: 1001,
        groups: Vec::new(),
    };
    let (inner, fh) = mount_with_file_opened_by(servers.clone(), owner);
    // A write the kernel sends with another task's credentials (mapped pages written back).
    inner
        .for_caller(other.clone())
        .write(fh, 0, b"abc".to_vec())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    // Another user's read of the file sends the buffer.
    inner
        .for_caller(other)
        .flush_ino(InodeId(INO))
        .await
        .unwrap_or_else(|e| panic!("flush: {e}"));
    assert_eq!(
        *servers.write_uids.lock().unwrap_or_else(|p| p.into_inner()),
        vec![1000],
        "the buffered bytes went out as someone other than the file's opener"
    );
}

#[tokio::test]
async fn a_size_read_while_a_send_is_in_flight_keeps_its_end_after_the_send() {
    // fsx seed 5 with two mounts: a getattr read the cached size (a truncation's), the
    // buffered write past it was acknowledged and its end cleared, and only then did the
    // getattr look for writes in flight: none, so the truncated size reached the kernel.
    let servers = Arc::new(Servers::default());
    let gate = Arc::new(Gate::default());
    *servers.gate.lock().unwrap_or_else(|p| p.into_inner()) = Some(gate.clone());
    let (inner, fh) = mount_with_open_file(servers.clone());
    let inner = Arc::new(inner);
    let ino = InodeId(INO);
    let truncated = Inode {
        ino,
        size: 100,
        ..placeholder()
    };
    inner.inodes.add("/f", &truncated, inner.inodes.stamp());
    inner.inodes.observe_own(&truncated);
    inner
        .write(fh, 1000, b"abc".to_vec())
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    let sender = inner.clone();
    let send = tokio::spawn(async move { sender.flush_ino(ino).await });
    gate.reached.notified().await;
    // A getattr's order: writes in flight first, then the cached attributes.
    let pending = inner.pending(ino);
    let cached = inner
        .inodes
        .fresh(ino, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no cached attributes"));
    assert_eq!(cached.size, 100, "the send is still in flight");
    gate.go.notify_one();
    send.await
        .unwrap_or_else(|e| panic!("send task: {e}"))
        .unwrap_or_else(|e| panic!("send: {e}"));
    assert_eq!(inner.pending(ino).0, None, "the send ended");
    assert_eq!(
        inner.visible(cached, pending).size,
        1003,
        "the kernel was told a size below a write it was told was made"
    );
    // Read after the send: the cache holds the acknowledged size.
    let now = inner.pending(ino);
    let cached = inner.inodes.fresh(ino, Duration::from_secs(60));
    assert_eq!(cached.map(|i| inner.visible(i, now).size), Some(1003));
}

/// A lookup's contents answer a read only while they are the newest attributes this mount
/// saw: once a getattr brought newer ones (which the kernel then holds), they would make
/// the read come back short, and the kernel take that for the file's end (`it::zero_open`
/// once read a file another mount had just written as empty).
#[tokio::test]
async fn a_lookup_s_contents_older_than_attributes_seen_since_are_not_read() {
    let (m, _) = mount_with_open_file(Arc::new(Servers::default()));
    let file = |size: u64, mtime_ns: i64| Inode {
        ino: InodeId(9),
        kind: myriad_client::FileKind::File,
        size,
        mtime_ns,
        ..placeholder()
    };
    let pid = 42;
    let since = m.inodes.stamp();
    m.looked_up((pid, "/g", since), file(0, 1), Vec::new());
    assert!(
        m.take_prefetched(InodeId(9), pid).is_some(),
        "taken while current"
    );
    let since = m.inodes.stamp();
    m.looked_up((pid, "/g", since), file(0, 1), Vec::new());
    m.inodes.observe_remote(&file(15, 2), m.inodes.stamp());
    assert!(m.take_prefetched(InodeId(9), pid).is_none());
}
