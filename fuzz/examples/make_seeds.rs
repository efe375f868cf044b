//! Writes the seed corpus of every fuzz target (`fuzz/corpus/<target>/`) from real
//! messages and records, made with the crates' own constructors and encoders, so the fuzzer
//! starts from inputs that reach deep into each decoder.
//!
//! Run (from the repository root): `cargo run --manifest-path fuzz/Cargo.toml --example
//! make_seeds [TARGET...]`. It replaces the seed files of every target (or of the targets
//! named); commit the result.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use myriad_fuzz::{block_on, fixed_frame_seal, join_chunks};
use myriad_membership::{MapCommand, MapStateMachine, NodeId, TypeConfig};
use myriad_placement::{ClusterMap, Shard, ShardMap};
use myriad_proto::InodeId;
use myriad_proto::auth::{Keyring, client_key_line, secret_line};
use myriad_proto::codec::encode;
use myriad_proto::{
    Auth, AuthReply, Caller, DirAction, DirEntry, Endpoints, ExportedEntry, FileKind, Hello,
    HelloReply, Inode, InodeOp, MAGIC, PROTOCOL_VERSION, PeerKind, RaftRpc, RenameFlags, ReplOp,
    Request, RequestFrame, Response, ResponseFrame, SetAttr, StatFs, WireError, Xattr, XattrMode,
};
use myriad_proto::{ClientRequest, PeerRequest, ReplicaRequest, ServerRequest};
use myriad_storage::{Batch, DirRecord, EntryRecord, Kv, LocalShard, MemKv, Pending, Space, Store};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftSnapshotBuilder,
    SnapshotMeta, StoredMembership, Vote,
};
use tokio_util::codec::Encoder;

type Seeds = Vec<(&'static str, Vec<u8>)>;
/// The seed generator of one target.
type SeedsOf = fn() -> Seeds;

fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    encode(v).unwrap_or_else(|e| panic!("seed does not encode: {e}"))
}

fn with_selector(selector: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![selector];
    out.extend_from_slice(body);
    out
}

fn le(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn addrs(n: u16) -> Vec<String> {
    (1..=n).map(|i| format!("127.0.0.1:{}", 7000 + i)).collect()
}

fn inode(ino: u64, kind: FileKind, size: u64) -> Inode {
    Inode {
        ino: InodeId(ino),
        kind,
        mode: if kind == FileKind::Directory {
            0o755
        } else {
            0o644
        },
        uid: 1000,
        gid: 100,
        size,
        nlink: 1,
        atime_ns: 1_700_000_000_000_000_000,
        mtime_ns: 1_700_000_000_500_000_000,
        ctime_ns: 1_700_000_001_000_000_000,
        symlink_target: None,
        xattrs: Vec::new(),
        link_home: None,
        rdev: 0,
    }
}

fn rich_inode() -> Inode {
    let mut i = inode((3 << 40) | 17, FileKind::File, 5);
    i.xattrs = vec![Xattr {
        name: "user.tag".into(),
        value: b"blue".to_vec(),
    }];
    i
}

fn caller() -> Caller {
    Caller {
        uid: 1000,
        gid: 100,
        groups: vec![4, 27],
    }
}

fn maps() -> Vec<(&'static str, ClusterMap)> {
    let three = ClusterMap::build(3, &addrs(3), 8, 3);
    let five = ClusterMap::build(7, &addrs(5), 4, 3);
    let mut weighted = ClusterMap::build(2, &addrs(2), 2, 2);
    weighted.nodes[1].weight = 2;
    let down = five
        .mark_down(myriad_placement::NodeId(2))
        .unwrap_or_else(|| five.clone());
    let leaving = five
        .mark_leaving(myriad_placement::NodeId(3))
        .unwrap_or_else(|| five.clone());
    let expired: BTreeSet<myriad_placement::NodeId> =
        [myriad_placement::NodeId(2)].into_iter().collect();
    let moving = down.plan_moves(&expired, 4).unwrap_or_else(|| down.clone());
    vec![
        ("one-node", ClusterMap::new(1, &addrs(1))),
        ("three-nodes-r3", three),
        ("five-nodes", five),
        ("weighted", weighted),
        ("node-down", down),
        ("node-leaving", leaving),
        ("moves-in-progress", moving),
    ]
}

fn small_map() -> ClusterMap {
    ClusterMap::build(4, &addrs(2), 1, 2)
}

fn request(id: u64, ends: Endpoints, body: impl Into<Request>) -> Vec<u8> {
    enc(&RequestFrame {
        id,
        epoch: 3,
        ends,
        caller: caller(),
        body: body.into(),
    })
}

fn requests() -> Seeds {
    let to = Endpoints::to(myriad_placement::PartitionId(2));
    let peer = Endpoints {
        target: myriad_placement::PartitionId(5),
        source: myriad_placement::PartitionId(2),
    };
    vec![
        (
            "create-with-data",
            request(
                1,
                to,
                ClientRequest::Create(myriad_proto::requests::Create {
                    path: "/home/ada/notes.txt".into(),
                    mode: 0o644,
                    exclusive: true,
                    data: b"hello, myriad\n".to_vec(),
                    durable: true,
                    ino: None,
                    data_at: None,
                    then: None,
                }),
            ),
        ),
        (
            "create-once",
            request(
                1,
                to,
                myriad_proto::Envelope::Once(myriad_proto::SentOnce {
                    id: myriad_proto::OnceId {
                        client: 0x5eed_0f_c11e47,
                        seq: 42,
                        low: 40,
                    },
                    request: ClientRequest::Unlink {
                        path: "/home/ada/old.txt".into(),
                    },
                    visible: false,
                }),
            ),
        ),
        (
            "fetch",
            request(
                2,
                to,
                ClientRequest::Fetch {
                    path: "/home/ada/notes.txt".into(),
                    max_bytes: 65_536,
                },
            ),
        ),
        (
            "readdir-after",
            request(
                3,
                to,
                ClientRequest::ReadDir {
                    path: "/home/ada".into(),
                    from: 1 << 62,
                    after: Some("notes.txt".into()),
                    limit: 1024,
                },
            ),
        ),
        (
            "rename",
            request(
                4,
                to,
                ClientRequest::Rename {
                    from: "/a/old".into(),
                    to: "/b/new".into(),
                    flags: RenameFlags {
                        no_replace: true,
                        exchange: false,
                    },
                },
            ),
        ),
        (
            "mkdir-split",
            request(
                5,
                to,
                ClientRequest::Mkdir {
                    path: "/big".into(),
                    mode: 0o755,
                    shards: 16,
                },
            ),
        ),
        (
            "stat-many",
            request(
                6,
                to,
                ClientRequest::StatMany {
                    dir: "/d".into(),
                    names: vec!["a".into(), "b".into(), "ünï".into()],
                },
            ),
        ),
        (
            "write",
            request(
                7,
                to,
                ClientRequest::Write(myriad_proto::requests::Write {
                    path: "/f".into(),
                    ino: InodeId(77),
                    offset: 4096,
                    data: vec![0xab; 64],
                    opened: true,
                }),
            ),
        ),
        (
            "write-chunk",
            request(
                8,
                to,
                ClientRequest::WriteChunk {
                    ino: InodeId(77),
                    chunk: 2,
                    offset: 0,
                    data: vec![1, 2, 3, 4],
                    cap: Some(
                        myriad_proto::auth::Keyring::from_secret(&[7; 32])
                            .capability_key()
                            .map(|k| k.grant(InodeId(77), true, 1 << 62))
                            .unwrap_or_else(|| panic!("a secret's keyring makes capabilities")),
                    ),
                },
            ),
        ),
        (
            "grant",
            request(
                8,
                to,
                ClientRequest::Grant {
                    path: "/data/big.bin".into(),
                    ino: InodeId(77),
                    write: false,
                    opened: true,
                },
            ),
        ),
        (
            "setxattr",
            request(
                9,
                to,
                ClientRequest::SetXattr {
                    path: "/f".into(),
                    name: "user.k".into(),
                    value: Some(serde_bytes::ByteBuf::from(b"v".to_vec())),
                    mode: XattrMode::Create,
                },
            ),
        ),
        (
            "setattr",
            request(
                10,
                to,
                ClientRequest::SetAttr {
                    path: "/f".into(),
                    set: SetAttr {
                        mode: Some(0o600),
                        uid: None,
                        gid: Some(5),
                        atime_ns: None,
                        mtime_ns: Some(-1),
                        touch: false,
                        of: None,
                    },
                },
            ),
        ),
        (
            "install-map",
            request(
                11,
                Endpoints::SERVER,
                ServerRequest::InstallMap(Box::new(small_map())),
            ),
        ),
        (
            "rename-prepare",
            request(
                12,
                peer,
                PeerRequest::RenamePrepare {
                    txid: (5 << 40) | 3,
                    coordinator: myriad_placement::PartitionId(2),
                    to: "/b/new".into(),
                    inode: rich_inode(),
                    flags: RenameFlags::default(),
                    blocks: vec![(0, serde_bytes::ByteBuf::from(b"hello".to_vec()))],
                    replaces: None,
                    client: Some(7),
                },
            ),
        ),
        (
            "at-inode",
            request(
                13,
                peer,
                PeerRequest::AtInode {
                    ino: InodeId(99),
                    caller: caller(),
                    op: InodeOp::Write {
                        ino: InodeId(99),
                        offset: 1,
                        data: vec![7; 8],
                        opened: false,
                    },
                },
            ),
        ),
        (
            "replicate",
            request(
                14,
                peer,
                ReplicaRequest::Replicate {
                    seq: 42,
                    prev_chain: 0x1234_5678_9abc_def0,
                    chain: 0x0fed_cba9_8765_4321,
                    acked: 41,
                    ops: std::sync::Arc::new(vec![
                        ReplOp {
                            space: 1,
                            key: b"/d\0\x01\x02\x03\x04\x05\x06\x07\x08f".to_vec(),
                            value: Some(serde_bytes::ByteBuf::from(vec![1, 0])),
                        },
                        ReplOp {
                            space: 3,
                            key: vec![0; 16],
                            value: None,
                        },
                    ]),
                },
            ),
        ),
        (
            "dir-import",
            request(
                15,
                peer,
                PeerRequest::DirImport(myriad_proto::requests::DirImport {
                    path: "/moved".into(),
                    txid: 8,
                    ino: InodeId(1234),
                    shards: vec![Shard {
                        prefix: 1,
                        depth: 1,
                    }],
                    map: Some(ShardMap::presplit(1)),
                    entries: vec![ExportedEntry {
                        name: "x".into(),
                        inode: inode(1235, FileKind::File, 3),
                        blocks: vec![(0, serde_bytes::ByteBuf::from(b"xyz".to_vec()))],
                    }],
                    replaces: None,
                }),
            ),
        ),
        (
            "dir-finish",
            request(
                16,
                peer,
                PeerRequest::DirFinish {
                    path: "/moved".into(),
                    txid: 8,
                    action: DirAction::Drop {
                        keep_blocks_of: Some("/other".into()),
                    },
                },
            ),
        ),
        (
            "raft-vote",
            request(
                17,
                Endpoints::SERVER,
                PeerRequest::Raft {
                    rpc: RaftRpc::Vote,
                    payload: enc(&VoteRequest::<NodeId>::new(Vote::new(3, 1), None)),
                },
            ),
        ),
        (
            "statfs",
            request(18, Endpoints::SERVER, ServerRequest::StatFs),
        ),
    ]
}

fn response(id: u64, result: Result<Response, WireError>) -> Vec<u8> {
    enc(&ResponseFrame { id, result })
}

fn responses() -> Seeds {
    let dir = inode(1 << 40 | 2, FileKind::Directory, 0);
    vec![
        ("unit", response(1, Ok(Response::Unit))),
        ("attr", response(2, Ok(Response::Attr(rich_inode())))),
        (
            "fetched",
            response(
                3,
                Ok(Response::Fetched {
                    inode: rich_inode(),
                    data: b"hello".to_vec(),
                }),
            ),
        ),
        (
            "dir-page",
            response(
                4,
                Ok(Response::DirPage {
                    entries: vec![
                        DirEntry {
                            name: "sub".into(),
                            inode: dir.clone(),
                        },
                        DirEntry {
                            name: "f".into(),
                            inode: rich_inode(),
                        },
                    ],
                    next: Some("f".into()),
                    hidden: false,
                    shard_end: Some(1 << 63),
                    map: Some(Box::new(ShardMap::presplit(2))),
                }),
            ),
        ),
        (
            "attrs-mixed",
            response(
                5,
                Ok(Response::Attrs(vec![
                    Ok(dir),
                    Err(WireError::NotFound),
                    Err(WireError::PermissionDenied),
                ])),
            ),
        ),
        ("map", response(6, Ok(Response::Map(Box::new(small_map()))))),
        (
            "redirect",
            response(7, Err(WireError::Redirect(Box::new(small_map())))),
        ),
        (
            "wrong-shard",
            response(
                8,
                Err(WireError::WrongShard {
                    dir: "/big".into(),
                    map: Some(Box::new(ShardMap::presplit(3))),
                }),
            ),
        ),
        ("not-found", response(9, Err(WireError::NotFound))),
        (
            "invalid-argument",
            response(10, Err(WireError::InvalidArgument("bad path".into()))),
        ),
        (
            "statfs",
            response(
                11,
                Ok(Response::StatFs(StatFs {
                    total_bytes: 1 << 40,
                    free_bytes: 1 << 39,
                    used_bytes: 1 << 39,
                    files: 12345,
                    tiers: Vec::new(),
                })),
            ),
        ),
        (
            "seqs",
            response(
                12,
                Ok(Response::Seqs(vec![
                    (myriad_placement::PartitionId(1), Some(5)),
                    (myriad_placement::PartitionId(2), None),
                ])),
            ),
        ),
        (
            "replica-page",
            response(
                13,
                Ok(Response::ReplicaPage(vec![ReplOp {
                    space: 2,
                    key: b"/d".to_vec(),
                    value: Some(serde_bytes::ByteBuf::from(vec![
                        1, 2, 0, 0, 0, 1, 1, 0, 0, 0, 0,
                    ])),
                }])),
            ),
        ),
        (
            "lease",
            response(
                14,
                Ok(Response::Lease {
                    granted: true,
                    epoch: 9,
                }),
            ),
        ),
        (
            "replica-gap",
            response(15, Ok(Response::ReplicaGap { next: Some(17) })),
        ),
    ]
}

fn hellos() -> Seeds {
    let hello = |peer: PeerKind, magic: u32, key_id: Option<[u8; 8]>| Hello {
        magic,
        version: PROTOCOL_VERSION,
        peer,
        key_id,
        nonce: [0x11; 32],
        zone: "a".into(),
        min_version: PROTOCOL_VERSION - 1,
    };
    let reply = |refused: Option<String>| HelloReply {
        version: PROTOCOL_VERSION,
        node_id: myriad_placement::NodeId(2),
        epoch: 7,
        nonce: [0x22; 32],
        proof: if refused.is_some() {
            [0; 32]
        } else {
            [0x33; 32]
        },
        refused,
        newest: PROTOCOL_VERSION,
    };
    vec![
        (
            "client",
            enc(&hello(PeerKind::Client, MAGIC, Some(*b"clientid"))),
        ),
        (
            "server",
            enc(&hello(
                PeerKind::Server {
                    node_id: myriad_placement::NodeId(3),
                },
                MAGIC,
                Some(*b"clusterk"),
            )),
        ),
        ("no-key", enc(&hello(PeerKind::Client, MAGIC, None))),
        (
            "bad-magic",
            enc(&hello(PeerKind::Client, 0x4854_5450, None)),
        ),
        ("reply", enc(&reply(None))),
        ("reply-refused", enc(&reply(Some("unknown key".into())))),
        (
            "auth",
            enc(&Auth {
                proof: client_proof(),
            }),
        ),
        ("auth-reply", enc(&AuthReply { refused: None })),
        (
            "auth-reply-refused",
            enc(&AuthReply {
                refused: Some("bad proof".into()),
            }),
        ),
        // Key files (`Keyring::parse`).
        (
            "keyfile-secret",
            format!("{}\n", secret_line(&[7; 32])).into_bytes(),
        ),
        (
            "keyfile-client",
            format!("# client key\n{}\n", client_key_line(&[7; 32])).into_bytes(),
        ),
        (
            "keyfile-rotated",
            format!(
                "# rotated\n{}\n\n  {}  # old\r\n",
                secret_line(&[8; 32]),
                secret_line(&[7; 32])
            )
            .into_bytes(),
        ),
        ("keyfile-bad-line", b"cluster:12\nsecret:00\n".to_vec()),
    ]
}

/// A real client proof (of the fixed key of `fixed_frame_seal`).
fn client_proof() -> [u8; 32] {
    let ring = Keyring::from_secret(&[7; 32]);
    let key = ring
        .connect_key()
        .unwrap_or_else(|| panic!("a keyring from a secret has a key"));
    key.client_proof(b"hello", b"reply")
}

/// `bodies` as the tagged frames of a connection after the handshake (`fixed_frame_seal`).
fn sealed(bodies: &[&[u8]]) -> Vec<u8> {
    let mut codec = myriad_net::frame_codec();
    codec.seal_with(fixed_frame_seal());
    let mut out = BytesMut::new();
    for b in bodies {
        codec
            .encode(Bytes::copy_from_slice(b), &mut out)
            .unwrap_or_else(|e| panic!("seal: {e}"));
    }
    out.to_vec()
}

fn framed(bodies: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(b);
    }
    out
}

fn frame_streams() -> Seeds {
    let h = hellos();
    let r = requests();
    let s = responses();
    let mut truncated = framed(&[&r[0].1]);
    truncated.truncate(truncated.len() - 3);
    let mut too_long = 9_000_000u32.to_be_bytes().to_vec();
    too_long.extend_from_slice(b"abc");
    vec![
        (
            "client-session",
            framed(&[&h[0].1, &r[0].1, &r[1].1, &r[2].1]),
        ),
        ("server-session", framed(&[&h[1].1, &r[11].1, &r[13].1])),
        ("responses", framed(&[&h[3].1, &s[2].1, &s[3].1, &s[6].1])),
        ("partial-frame", truncated),
        ("frame-too-long", too_long),
        ("empty-frames", framed(&[b"", b"", &r[17].1])),
        // Tagged streams; the last three bytes also choose the byte of the re-sealed stream
        // that frame_stream changes (position, little-endian u16; XOR mask, 0 for none).
        ("sealed-requests", sealed(&[&r[0].1, &r[1].1, &r[13].1])),
        ("sealed-responses", sealed(&[&s[0].1, &s[3].1, b""])),
        (
            "sealed-flip-body",
            [sealed(&[&r[2].1, &r[6].1]), vec![40, 0, 0x80]].concat(),
        ),
        (
            "plain-flip-length",
            [framed(&[&r[0].1, &r[1].1]), vec![2, 0, 0x01]].concat(),
        ),
    ]
}

/// Records as the store writes them: real `Store` writes read back raw from the engine.
fn storage() -> Seeds {
    let mem = Arc::new(MemKv::new());
    let kv: Arc<dyn Kv> = mem.clone();
    let store = Store::open(kv.clone(), 1).unwrap_or_else(|e| panic!("store: {e}"));
    let mut b = Batch::new();
    let mut split = DirRecord::new(InodeId(1 << 40 | 2));
    split.shards = vec![
        LocalShard::new(Shard {
            prefix: 0,
            depth: 1,
        }),
        LocalShard {
            shard: Shard {
                prefix: 1,
                depth: 1,
            },
            splitting: Some(9),
            hidden: None,
        },
    ];
    split.map = Some(ShardMap::presplit(1));
    let mut root = DirRecord::new(InodeId(1));
    root.root_attrs = Some(inode(1, FileKind::Directory, 0));
    store.put_dir(&mut b, "/d", &split);
    store.put_dir(&mut b, "/", &root);
    let file = EntryRecord {
        inode: Some(rich_inode()),
        pending: None,
    };
    let pending = EntryRecord {
        inode: None,
        pending: Some(Pending {
            txid: 5 << 40 | 1,
            after: Some(inode(88, FileKind::Directory, 0)),
        }),
    };
    store.put_entry(&mut b, "/d", "notes.txt", &file);
    store.put_entry(&mut b, "/d", "sub", &pending);
    store.put_intent(&mut b, 5 << 40 | 1, b"opaque intent".to_vec());
    store.put_block(&mut b, InodeId(77), 0, b"hello".to_vec());
    store.put_block(&mut b, InodeId(77), 3, vec![9; 32]);
    store.commit(b).unwrap_or_else(|e| panic!("commit: {e}"));

    let raw = |space: Space, key: &[u8]| -> Vec<u8> {
        mem.get(space, key)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no {key:?} in {}", space.name()))
    };
    let dir_d = raw(Space::Dirs, b"/d");
    let dir_root = raw(Space::Dirs, b"/");
    let entries = mem
        .scan(Space::Entries, b"/d\0", None, 16)
        .unwrap_or_default();
    let suffix = |k: &[u8]| k[3..].to_vec();
    let intent_key = (5u64 << 40 | 1).to_be_bytes();
    let block_key0 = [&77u64.to_be_bytes()[..], &0u64.to_be_bytes()[..]].concat();
    let block_key3 = [&77u64.to_be_bytes()[..], &3u64.to_be_bytes()[..]].concat();
    // Block values as stored (data + checksum), and one damaged copy.
    let blk0 = raw(Space::Blocks, &block_key0);
    let blk3 = raw(Space::Blocks, &block_key3);
    let mut damaged = blk3.clone();
    damaged[0] ^= 1;
    let intent_value = raw(Space::Intents, &intent_key);
    let k_b4 = [
        &[0u8][..],
        &77u64.to_be_bytes()[..],
        &4u64.to_be_bytes()[..],
    ]
    .concat();
    let fmt = raw(Space::Meta, b"format_version");
    let node = raw(Space::Meta, b"node_id");

    let entry_chunks: Vec<Vec<u8>> = entries
        .iter()
        .flat_map(|(k, v)| [suffix(k), v.clone()])
        .collect();
    let mut case5: Vec<&[u8]> = Vec::new();
    let params5 = [le(&[0, u64::MAX]), b"notes.txt".to_vec()].concat();
    case5.push(&params5);
    case5.extend(entry_chunks.iter().map(Vec::as_slice));
    // Space selector byte before each key: even blocks, odd intents.
    let k_int = [&[1u8][..], &intent_key].concat();
    let k_b0 = [&[0u8][..], &block_key0].concat();
    let k_b3 = [&[0u8][..], &block_key3].concat();
    let params6 = le(&[77, 0, 300_000]);
    let params7 = le(&[77, 65_000]);
    let data7 = vec![0x5a; 2000];
    vec![
        ("entry-file", with_selector(0, &enc(&file))),
        ("entry-pending", with_selector(0, &enc(&pending))),
        ("dir-split", with_selector(1, &enc(&split))),
        ("dir-root", with_selector(1, &enc(&root))),
        ("pending", with_selector(2, &enc(&pending.pending))),
        ("local-shard", with_selector(3, &enc(&split.shards[1]))),
        (
            "store-dirs",
            with_selector(4, &join_chunks(&[&dir_d, &dir_root])),
        ),
        (
            "store-dir-bad-version",
            with_selector(
                4,
                &join_chunks(&[&[[2u8].as_slice(), &dir_d[1..]].concat()]),
            ),
        ),
        ("store-entries", with_selector(5, &join_chunks(&case5))),
        (
            "store-keys",
            with_selector(
                6,
                &join_chunks(&[
                    &params6,
                    &k_int,
                    &intent_value,
                    &k_b0,
                    &blk0,
                    &k_b3,
                    &blk3,
                    &k_b4,
                    &damaged,
                    &[0, 1, 2],
                    b"short key",
                ]),
            ),
        ),
        (
            "store-meta-blocks",
            with_selector(7, &join_chunks(&[&fmt, &node, &params7, &data7])),
        ),
    ]
}

fn log_id(term: u64, index: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn membership() -> Seeds {
    let nodes: BTreeMap<NodeId, BasicNode> = (1..=3)
        .map(|i| (i, BasicNode::new(format!("127.0.0.1:{}", 7000 + i))))
        .collect();
    let voters: BTreeSet<NodeId> = nodes.keys().copied().collect();
    let members = Membership::new(vec![voters], nodes);
    let blank = Entry::<TypeConfig> {
        log_id: log_id(1, 1),
        payload: EntryPayload::Blank,
    };
    let member_entry = Entry::<TypeConfig> {
        log_id: log_id(1, 2),
        payload: EntryPayload::Membership(members.clone()),
    };
    let install = Entry::<TypeConfig> {
        log_id: log_id(2, 3),
        payload: EntryPayload::Normal(MapCommand::Install(small_map())),
    };

    // The state machine's own records: apply real entries, snapshot, read them back raw.
    let mem = Arc::new(MemKv::new());
    let mut sm = MapStateMachine::new(mem.clone());
    let snapshot_data = block_on(async {
        sm.apply(vec![blank.clone(), member_entry.clone(), install.clone()])
            .await
            .unwrap_or_else(|e| panic!("apply: {e}"));
        let mut builder = sm.get_snapshot_builder().await;
        let snap = builder
            .build_snapshot()
            .await
            .unwrap_or_else(|e| panic!("snapshot: {e}"));
        snap.snapshot.into_inner()
    });
    let state = mem
        .get(Space::RaftState, b"sm")
        .ok()
        .flatten()
        .unwrap_or_default();
    let stored_snapshot = mem
        .get(Space::RaftState, b"snapshot")
        .ok()
        .flatten()
        .unwrap_or_default();
    let meta = SnapshotMeta::<NodeId, BasicNode> {
        last_log_id: Some(log_id(2, 3)),
        last_membership: StoredMembership::new(Some(log_id(1, 2)), members),
        snapshot_id: "2-3".into(),
    };

    let vote = enc(&Vote::<NodeId>::new_committed(2, 1));
    let committed = enc(&Some(log_id(2, 3)));
    let purged = enc(&Option::<LogId<NodeId>>::None);
    let k1 = 1u64.to_be_bytes();
    let k2 = 2u64.to_be_bytes();
    let k3 = 3u64.to_be_bytes();
    let (e1, e2, e3) = (enc(&blank), enc(&member_entry), enc(&install));
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(log_id(1, 1)),
        entries: vec![member_entry.clone(), install.clone()],
        leader_commit: Some(log_id(1, 1)),
    };
    let install_req = InstallSnapshotRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        meta: meta.clone(),
        offset: 0,
        data: snapshot_data.clone(),
        done: true,
    };
    vec![
        ("entry-blank", with_selector(0, &e1)),
        ("entry-membership", with_selector(0, &e2)),
        ("entry-install-map", with_selector(0, &e3)),
        (
            "map-command",
            with_selector(1, &enc(&MapCommand::Install(small_map()))),
        ),
        ("vote", with_selector(2, &vote)),
        ("append-entries", with_selector(3, &enc(&append))),
        (
            "vote-request",
            with_selector(
                4,
                &enc(&VoteRequest::<NodeId>::new(
                    Vote::new(3, 2),
                    Some(log_id(2, 3)),
                )),
            ),
        ),
        (
            "install-snapshot-request",
            with_selector(4, &enc(&install_req)),
        ),
        (
            "log-store",
            with_selector(
                5,
                &join_chunks(&[&vote, &committed, &purged, &k1, &e1, &k2, &e2, &k3, &e3]),
            ),
        ),
        (
            "state-machine",
            with_selector(6, &join_chunks(&[&state, &stored_snapshot])),
        ),
        (
            "snapshot-install",
            with_selector(7, &join_chunks(&[&snapshot_data, &enc(&meta), &e3])),
        ),
        ("snapshot-empty", with_selector(7, &join_chunks(&[b""]))),
    ]
}

fn cluster_maps() -> Seeds {
    let mut seeds: Seeds = maps()
        .into_iter()
        .map(|(n, m)| (n, m.to_json().into_bytes()))
        .collect();
    let mut dup = ClusterMap::build(1, &addrs(2), 1, 1);
    dup.nodes[1].id = myriad_placement::NodeId(1);
    seeds.push(("invalid-duplicate-node", dup.to_json().into_bytes()));
    seeds.push(("not-json", b"epoch: 1\nnodes: []\n".to_vec()));
    // Found by the fuzzer: an epoch with no room to grow passed `validate`, and `mark_down`
    // overflowed it. Now refused (EPOCH_MAX).
    let mut last = ClusterMap::build(1, &addrs(3), 1, 2);
    last.epoch = u64::MAX;
    seeds.push(("invalid-epoch-max", last.to_json().into_bytes()));
    seeds
}

fn paths() -> Seeds {
    [
        ("root", "/"),
        ("nested", "/a/b/c"),
        ("unicode", "/with space/ünïcode/文件"),
        ("relative", "a/b"),
        ("double-slash", "/a//b"),
        ("dot-dot", "/a/../b"),
        ("trailing-slash", "/a/"),
        ("nul", "/a\0b"),
        ("name", "notes.txt"),
        ("dot", "."),
    ]
    .into_iter()
    .map(|(n, p)| (n, p.as_bytes().to_vec()))
    .chain([("long-name", format!("/{}", "x".repeat(255)).into_bytes())])
    .collect()
}

fn write(root: &Path, target: &str, seeds: Seeds) {
    let dir = root.join(target);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let n = seeds.len();
    for (name, bytes) in seeds {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    println!("{target}: {n} seeds");
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let only: Vec<String> = std::env::args().skip(1).collect();
    let targets: [(&str, SeedsOf); 8] = [
        ("request_frame", requests),
        ("response_frame", responses),
        ("hello", hellos),
        ("frame_stream", frame_streams),
        ("storage_records", storage),
        ("cluster_map", cluster_maps),
        ("membership", membership),
        ("path", paths),
    ];
    for name in &only {
        if !targets.iter().any(|(t, _)| t == name) {
            eprintln!("make_seeds: no fuzz target {name}");
            std::process::exit(2);
        }
    }
    for (target, seeds) in targets {
        if only.is_empty() || only.iter().any(|o| o == target) {
            write(&root, target, seeds());
        }
    }
}
