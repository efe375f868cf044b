//! The mount's write buffer through its seam to the servers: a client over a transport that
//! fails when told to (fault injection) and otherwise takes writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use myriad_client::{ClientConfig, ClusterMap, FileHandle, Keyring, Transport};
use myriad_proto::{Caller, ClientRequest, Endpoints, Request, Response};

use super::*;
use crate::handles::OpenFile;

const INO: u64 = 5;

/// The servers: writes land (recorded) unless `fail` holds an error for the next one.
#[derive(Default)]
struct Servers {
    fail: Mutex<Option<FsError>>,
    writes: Mutex<Vec<(u64, Vec<u8>)>>,
    /// The uid each write came as.
    write_uids: Mutex<Vec<u32>>,
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
    ) -> Pin<Box<dyn Future<Output = Result<Response, FsError>> + Send + 'a>> {
        Box::pin(async move {
            if let Some(e) = self.fail.lock().map(|mut f| f.take()).ok().flatten() {
                return Err(e);
            }
            // Changes come sent once (their retries carry the same id).
            let req = match req {
                Request::Client(ClientRequest::Once { request, .. }) => request.as_ref(),
                Request::Client(c) => c,
                other => return Err(FsError::NotSupported(format!("{other:?}"))),
            };
            match req {
                ClientRequest::Write { offset, data, .. } => {
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
                other => Err(FsError::NotSupported(format!("{other:?}"))),
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
        Some(FsError::Unavailable("down".into()));
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
    *servers.fail.lock().unwrap_or_else(|p| p.into_inner()) = Some(FsError::NoSpace);
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
    Client::as_caller(other.clone(), inner.write(fh, 0, b"abc".to_vec()))
        .await
        .unwrap_or_else(|e| panic!("write: {e}"));
    // Another user's read of the file sends the buffer.
    Client::as_caller(other, inner.flush_ino(InodeId(INO)))
        .await
        .unwrap_or_else(|e| panic!("flush: {e}"));
    assert_eq!(
        *servers.write_uids.lock().unwrap_or_else(|p| p.into_inner()),
        vec![1000],
        "the buffered bytes went out as someone other than the file's opener"
    );
}
