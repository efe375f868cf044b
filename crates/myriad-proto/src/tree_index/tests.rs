use super::*;

fn inode(ino: u64, kind: FileKind, mode: u32, uid: u32) -> Inode {
    let mut i = Inode::new(InodeId(ino), kind, mode, (uid, uid), 1);
    if kind == FileKind::File {
        i.size = 3;
    }
    i
}

fn entry(name: &str, i: Inode) -> IndexedEntry {
    let contents = (i.kind == FileKind::File).then(|| serde_bytes::ByteBuf::from(b"abc".to_vec()));
    IndexedEntry {
        name: name.into(),
        inode: Some(i),
        contents,
    }
}

fn caller(uid: u32) -> Caller {
    Caller {
        uid,
        gid: uid,
        groups: vec![],
    }
}

/// /sw (root) holds a (0755 dir) with f (0644), p (0700 dir owned by 7) and lib.
fn sample() -> TreeIndex {
    TreeIndex {
        root: "/sw".into(),
        root_ino: InodeId(10),
        version: 5,
        built_ns: 1,
        inline_limit: 100,
        dirs: vec![
            IndexedDir {
                rel: String::new(),
                entries: vec![
                    entry("a", inode(11, FileKind::Directory, 0o755, 0)),
                    entry("p", inode(12, FileKind::Directory, 0o700, 7)),
                ],
            },
            IndexedDir {
                rel: "a".into(),
                entries: vec![
                    entry("f", inode(13, FileKind::File, 0o644, 0)),
                    IndexedEntry {
                        name: "h".into(),
                        inode: None,
                        contents: None,
                    },
                ],
            },
        ],
    }
}

#[test]
fn an_index_and_a_registry_survive_encoding_and_damage_is_refused() {
    let idx = sample();
    let bytes = idx.encode();
    assert_eq!(TreeIndex::decode(&bytes), Ok(idx.clone()));
    for at in [0, 9, bytes.len() / 2, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        assert!(TreeIndex::decode(&bad).is_err(), "byte {at} flipped");
    }
    assert!(TreeIndex::decode(&bytes[..bytes.len() - 1]).is_err());
    let mut unordered = idx;
    unordered.dirs[1].entries.reverse();
    assert!(TreeIndex::decode(&unordered.encode()).is_err());

    let tree = RegisteredTree {
        root: "/sw".into(),
        root_ino: InodeId(10),
        version: 5,
        file: index_file_name(InodeId(10), 5),
        bytes: bytes.len() as u64,
        sha256: file_digest(&bytes),
        dirs: 2,
        entries: 4,
        built_ns: 1,
        auto: true,
    };
    assert_eq!(
        RegisteredTree::decode("10.5", &tree.encode()),
        Ok(tree.clone())
    );
    // An entry written before automatic indexes reads as a manual index.
    let v1 = (
        &tree.root,
        tree.root_ino,
        tree.version,
        &tree.file,
        tree.bytes,
        tree.sha256,
        tree.dirs,
        tree.entries,
        tree.built_ns,
    );
    let old = super::seal(
        super::REGISTRY_MAGIC_V1,
        &postcard::to_stdvec(&v1).unwrap_or_else(|e| panic!("{e}")),
    );
    let manual = RegisteredTree {
        auto: false,
        ..tree.clone()
    };
    assert_eq!(RegisteredTree::decode("10.5", &old), Ok(manual));
    assert!(
        RegisteredTree::decode("10.6", &tree.encode()).is_err(),
        "an entry under another name"
    );
    assert!(
        RegisteredTree::decode("10.5", &bytes).is_err(),
        "an index is not a registry entry"
    );
    let reg = Registry { trees: vec![tree] };
    assert_eq!(reg.tree_of("/sw/a/f").map(|t| t.version), Some(5));
    assert_eq!(reg.tree_of("/sw").map(|t| t.version), Some(5));
    assert!(reg.tree_of("/swx/a").is_none());
    assert!(reg.tree_of("/").is_none());
}

#[test]
fn an_index_answers_as_the_servers_would_or_says_ask() {
    let view = IndexView::new(sample());
    let root = inode(10, FileKind::Directory, 0o755, 0);
    let anyone = caller(1000);
    match view.lookup("/sw/a/f", &anyone, &root) {
        Answer::Found(e, i) => {
            assert_eq!(i.ino, InodeId(13));
            assert_eq!(IndexView::contents(e, &anyone), Some(&b"abc"[..]));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(view.lookup("/sw/a/nope", &anyone, &root), Answer::Missing);
    assert_eq!(view.lookup("/sw/nope", &anyone, &root), Answer::Missing);
    // Missing along the way: the servers say NotFound too.
    assert_eq!(view.lookup("/sw/nope/x", &anyone, &root), Answer::Ask);
    // Hard-linked: attributes only the servers know.
    assert_eq!(view.lookup("/sw/a/h", &anyone, &root), Answer::Ask);
    // Not public below: not in the index.
    assert_eq!(view.lookup("/sw/p/x", &caller(7), &root), Answer::Ask);
    // The root denies search to this caller: the servers give the error.
    let closed = inode(10, FileKind::Directory, 0o700, 0);
    assert_eq!(view.lookup("/sw/a/f", &anyone, &closed), Answer::Ask);
    assert!(matches!(
        view.lookup("/sw/a/f", &caller(0), &closed),
        Answer::Found(..)
    ));
    // Outside the tree or the root itself: not the index's to answer.
    assert_eq!(view.lookup("/sw", &anyone, &root), Answer::Ask);
    assert_eq!(view.lookup("/other/a", &anyone, &root), Answer::Ask);

    // Listings: whole and readable only.
    let listed = view.listing("/sw", &anyone, &root).map(|l| {
        (0..l.len())
            .map(|i| l.get(i).name.clone())
            .collect::<Vec<_>>()
    });
    let mut in_server_order = vec!["a".to_string(), "p".to_string()];
    in_server_order.sort_by_key(|n| (crate::name_hash(n), n.clone()));
    assert_eq!(listed, Some(in_server_order));
    assert!(view.listing("/sw/a", &anyone, &root).is_none(), "h unknown");
    assert!(view.listing("/sw/p", &caller(7), &root).is_none());
    let no_read = inode(10, FileKind::Directory, 0o711, 0);
    assert!(view.listing("/sw", &anyone, &no_read).is_none());
}

#[test]
fn what_is_public_is_what_every_user_may_see() {
    let dir = inode(1, FileKind::Directory, 0o755, 0);
    assert!(public::listable(&dir));
    assert!(!public::listable(&inode(1, FileKind::Directory, 0o751, 0)));
    let f = inode(2, FileKind::File, 0o644, 0);
    assert!(public::contents(&f, 3) && !public::contents(&f, 2));
    assert!(!public::contents(&inode(2, FileKind::File, 0o640, 0), 3));
    let mut linked = f.clone();
    linked.nlink = 2;
    assert!(!public::attributes(&linked));
    let mut secret = inode(2, FileKind::File, 0o600, 0);
    secret.xattrs.push(crate::Xattr {
        name: "user.k".into(),
        value: vec![1],
    });
    assert!(!public::attributes(&secret));
    assert!(public::attributes(&inode(2, FileKind::File, 0o600, 0)));
}
