//! The metadata index of a frozen tree and the registry of indexes
//! (docs/metadata-index.md): their stored formats, and the pure rule that answers a
//! lookup or a listing from an index exactly as the servers would (the same permission
//! function, `access::allowed`), or says that only the servers can.
//!
//! Both are regular Myriad files under `INDEX_DIR`, readable by everyone, so an index
//! holds only what every user may see (invariant I2): the builder leaves out what is not
//! public, and records hard-linked files without attributes (a name outside the tree can
//! change them).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::access::{EXEC, READ, allowed};
use crate::{Caller, FileKind, FsError, Inode, InodeId};

/// Where index files live.
pub const INDEX_DIR: &str = "/.myriad/index";
/// The registry: one small file per index, named as its index file, holding its
/// `RegisteredTree`. Each build and drop is one create or unlink of its own name, so
/// concurrent ones never undo each other, and each recalls every client's lease on this
/// directory before it applies.
pub const TREES_DIR: &str = "/.myriad/index/trees";
/// `TREES_DIR`'s name in `INDEX_DIR`.
pub const TREES_NAME: &str = "trees";
/// Defaults of `myriad index build`: contents kept for public files up to this size, and
/// the most an index may take (encoded).
pub const DEFAULT_INLINE_BYTES: u64 = 16 * 1024;
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// The most an index may claim to decode to: a damaged or hostile file takes no more.
pub const DECODED_MAX: usize = 1 << 30;
/// The registry is small: this many trees at most are read.
pub const REGISTRY_TREES_MAX: usize = 4096;

const INDEX_MAGIC: [u8; 8] = *b"MYRIDX\x00\x01";
/// Registry entries written now (with `RegisteredTree::auto`).
const REGISTRY_MAGIC: [u8; 8] = *b"MYRREG\x00\x02";
/// Registry entries written before automatic indexes (`RegisteredTreeV1`).
const REGISTRY_MAGIC_V1: [u8; 8] = *b"MYRREG\x00\x01";
/// A registry entry named so is an automatic index's build under way (not yet usable):
/// `pending.<file>`, made live by renaming it to `<file>` (docs/metadata-index.md).
pub const PENDING_PREFIX: &str = "pending.";
/// Hit counts: one file per reporting mount, lines `<index file> <answers>`.
pub const HITS_DIR: &str = "/.myriad/index/hits";
/// Claims of automatic builds: `auto`, made exclusively by the builder (one at a time).
pub const CLAIMS_DIR: &str = "/.myriad/index/claims";
/// Magic, then the crc32c of everything after it.
const HEADER_BYTES: usize = 12;

/// A frozen tree's metadata, as one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeIndex {
    /// The tree's root (absolute, canonical).
    pub root: String,
    pub root_ino: InodeId,
    /// The freeze this index was built under (`ReadOnlyMark::version`).
    pub version: u64,
    pub built_ns: i64,
    /// Contents are kept for public regular files up to this size.
    pub inline_limit: u64,
    /// Every directory whose listing is public, from the root down (`rel` "" is the
    /// root). A directory not here is answered by the servers.
    pub dirs: Vec<IndexedDir>,
}

/// One directory's whole listing, in name order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedDir {
    /// Its path below the root, without a leading slash ("" for the root).
    pub rel: String,
    pub entries: Vec<IndexedEntry>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedEntry {
    pub name: String,
    /// `None`: only the servers know its attributes (a file with more than one link).
    pub inode: Option<Inode>,
    /// The whole contents of a public regular file up to the inline limit.
    pub contents: Option<serde_bytes::ByteBuf>,
}

/// Every index of the cluster (the entries of `TREES_DIR`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    pub trees: Vec<RegisteredTree>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredTree {
    pub root: String,
    pub root_ino: InodeId,
    pub version: u64,
    /// The index file's name in `INDEX_DIR`.
    pub file: String,
    /// Its size and SHA-256 (a copy cached on a client's disk must match both: the
    /// registry, in the cluster, vouches for a local file anyone might have written).
    pub bytes: u64,
    pub sha256: [u8; 32],
    pub dirs: u64,
    pub entries: u64,
    pub built_ns: i64,
    /// An automatic index: the tree is not frozen, its first change unregisters it.
    pub auto: bool,
}

/// A registry entry as written before automatic indexes (always manual).
#[derive(Deserialize)]
struct RegisteredTreeV1 {
    root: String,
    root_ino: InodeId,
    version: u64,
    file: String,
    bytes: u64,
    sha256: [u8; 32],
    dirs: u64,
    entries: u64,
    built_ns: i64,
}

impl From<RegisteredTreeV1> for RegisteredTree {
    fn from(v: RegisteredTreeV1) -> RegisteredTree {
        RegisteredTree {
            root: v.root,
            root_ino: v.root_ino,
            version: v.version,
            file: v.file,
            bytes: v.bytes,
            sha256: v.sha256,
            dirs: v.dirs,
            entries: v.entries,
            built_ns: v.built_ns,
            auto: false,
        }
    }
}

impl Registry {
    /// The registered tree `path` is in (itself or below its root), if any: the deepest.
    #[must_use]
    pub fn tree_of(&self, path: &str) -> Option<&RegisteredTree> {
        self.trees
            .iter()
            .filter(|t| below(&t.root, path).is_some())
            .max_by_key(|t| t.root.len())
    }
}

/// The index file name of a tree's build.
#[must_use]
pub fn index_file_name(root_ino: InodeId, version: u64) -> String {
    format!("{}.{version}", root_ino.0)
}

/// `path` relative to `root` ("" for the root itself), if it is the root or below it.
#[must_use]
pub fn below<'p>(root: &str, path: &'p str) -> Option<&'p str> {
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() {
        Some("")
    } else if root == "/" {
        Some(rest)
    } else {
        rest.strip_prefix('/')
    }
}

/// The digest a registry keeps of an index file (the whole file).
#[must_use]
pub fn file_digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

fn seal(magic: [u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn unseal<'b>(magic: [u8; 8], what: &str, bytes: &'b [u8]) -> Result<&'b [u8], FsError> {
    let bad = |why: &str| FsError::Protocol(format!("{what}: {why}"));
    if bytes.len() < HEADER_BYTES || bytes[..8] != magic {
        return Err(bad("not a Myriad index file (wrong magic)"));
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&bytes[8..HEADER_BYTES]);
    let body = &bytes[HEADER_BYTES..];
    if crc32c::crc32c(body) != u32::from_le_bytes(crc) {
        return Err(bad("checksum mismatch (damaged)"));
    }
    Ok(body)
}

impl TreeIndex {
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        // postcard of owned, plain data cannot fail.
        let plain = postcard::to_stdvec(self).unwrap_or_default();
        seal(INDEX_MAGIC, &lz4_flex::compress_prepend_size(&plain))
    }

    /// Decodes and checks an index file: magic, checksum, size, and that its directories
    /// and names are well formed and in order (a client answers by binary search).
    pub fn decode(bytes: &[u8]) -> Result<TreeIndex, FsError> {
        let body = unseal(INDEX_MAGIC, "index", bytes)?;
        let bad = |why: String| FsError::Protocol(format!("index: {why}"));
        let claimed = body
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| bad("truncated".into()))?;
        if claimed > DECODED_MAX {
            return Err(bad(format!("claims {claimed} bytes decoded")));
        }
        let plain = lz4_flex::decompress_size_prepended(body).map_err(|e| bad(e.to_string()))?;
        let index: TreeIndex = postcard::from_bytes(&plain).map_err(|e| bad(e.to_string()))?;
        index.check().map_err(bad)?;
        Ok(index)
    }

    fn check(&self) -> Result<(), String> {
        crate::validate_path(&self.root).map_err(|e| format!("root {}: {e}", self.root))?;
        let mut seen = std::collections::HashSet::new();
        for d in &self.dirs {
            if !seen.insert(d.rel.as_str()) {
                return Err(format!("directory {:?} twice", d.rel));
            }
            for pair in d.entries.windows(2) {
                if pair[0].name >= pair[1].name {
                    return Err(format!("names of {:?} out of order", d.rel));
                }
            }
            for e in &d.entries {
                crate::validate_name(&e.name).map_err(|err| format!("{:?}: {err}", e.name))?;
            }
        }
        Ok(())
    }

    /// Names in all listings.
    #[must_use]
    pub fn entry_count(&self) -> u64 {
        self.dirs.iter().map(|d| d.entries.len() as u64).sum()
    }
}

impl RegisteredTree {
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        seal(
            REGISTRY_MAGIC,
            &postcard::to_stdvec(self).unwrap_or_default(),
        )
    }

    /// Decodes a registry entry and checks it names its own file.
    pub fn decode(name: &str, bytes: &[u8]) -> Result<RegisteredTree, FsError> {
        let bad =
            |e: postcard::Error| FsError::Protocol(format!("index registry entry {name}: {e}"));
        let t: RegisteredTree = if bytes.starts_with(&REGISTRY_MAGIC_V1) {
            let body = unseal(REGISTRY_MAGIC_V1, "index registry entry", bytes)?;
            postcard::from_bytes::<RegisteredTreeV1>(body)
                .map_err(bad)?
                .into()
        } else {
            let body = unseal(REGISTRY_MAGIC, "index registry entry", bytes)?;
            postcard::from_bytes(body).map_err(bad)?
        };
        if t.file != name || t.file != index_file_name(t.root_ino, t.version) {
            return Err(FsError::Protocol(format!(
                "index registry entry {name} names {}",
                t.file
            )));
        }
        crate::validate_path(&t.root)?;
        Ok(t)
    }
}

/// What an index says of a name.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    Found(&'a IndexedEntry, &'a Inode),
    /// The name does not exist (`NotFound`, as the servers would answer).
    Missing,
    /// Only the servers can answer (not indexed, not public, or denied to this caller:
    /// their answer is the right error).
    Ask,
}

/// A loaded index, ready to answer: directories by path.
#[derive(Debug)]
pub struct IndexView {
    pub index: TreeIndex,
    dirs: HashMap<String, usize>,
    /// Per directory, its entries' positions in the servers' listing order (name hash,
    /// then name): computed once, so a page of a listing costs a binary search.
    order: Vec<Vec<u32>>,
}

/// A directory's whole listing, in the servers' order.
#[derive(Clone, Copy, Debug)]
pub struct Listing<'a> {
    entries: &'a [IndexedEntry],
    order: &'a [u32],
}

impl<'a> Listing<'a> {
    #[must_use]
    pub fn len(&self) -> usize {
        self.order.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The `i`-th entry in the servers' order.
    #[must_use]
    pub fn get(&self, i: usize) -> &'a IndexedEntry {
        &self.entries[self.order[i] as usize]
    }
}

impl IndexView {
    #[must_use]
    pub fn new(index: TreeIndex) -> IndexView {
        let dirs = index
            .dirs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.rel.clone(), i))
            .collect();
        let order = index
            .dirs
            .iter()
            .map(|d| {
                let mut o: Vec<u32> = (0..d.entries.len())
                    .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                    .collect();
                o.sort_by_cached_key(|&i| {
                    let name = &d.entries[i as usize].name;
                    (crate::name_hash(name), name.clone())
                });
                o
            })
            .collect();
        IndexView { index, dirs, order }
    }

    fn dir(&self, rel: &str) -> Option<&IndexedDir> {
        self.dirs.get(rel).map(|&i| &self.index.dirs[i])
    }

    /// Whether directory `path`'s listing is in the index.
    #[must_use]
    pub fn has_dir(&self, path: &str) -> bool {
        below(&self.index.root, path).is_some_and(|rel| self.dirs.contains_key(rel))
    }

    /// Whether the index holds the answer about `path` (its attributes, or that it is
    /// missing) for a caller the permissions let through.
    #[must_use]
    pub fn knows(&self, path: &str) -> bool {
        let Some(rel) = below(&self.index.root, path).filter(|r| !r.is_empty()) else {
            return false;
        };
        let (dir_rel, name) = match rel.rfind('/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => ("", rel),
        };
        self.dir(dir_rel).is_some_and(|dir| {
            match dir.entries.binary_search_by(|e| e.name.as_str().cmp(name)) {
                Ok(i) => dir.entries[i].inode.is_some(),
                Err(_) => true,
            }
        })
    }

    /// The entry of `path`, strictly below the root, for `caller`, who reached the root
    /// with attributes `root` (asked of the servers: the root's own entry is outside the
    /// tree). Every directory on the way must be searchable by the caller, as the
    /// servers check.
    #[must_use]
    pub fn lookup<'a>(&'a self, path: &str, caller: &Caller, root: &'a Inode) -> Answer<'a> {
        let Some(rel) = below(&self.index.root, path).filter(|r| !r.is_empty()) else {
            return Answer::Ask;
        };
        let (dir_rel, name) = match rel.rfind('/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => ("", rel),
        };
        match self.resolve_dir(dir_rel, caller, root) {
            Some(dir) => match dir.entries.binary_search_by(|e| e.name.as_str().cmp(name)) {
                Ok(i) => match &dir.entries[i].inode {
                    Some(inode) => Answer::Found(&dir.entries[i], inode),
                    None => Answer::Ask,
                },
                Err(_) => Answer::Missing,
            },
            None => Answer::Ask,
        }
    }

    /// Directory `rel`'s listing if the caller may search every directory down to it
    /// (`None`: ask the servers).
    fn resolve_dir<'a>(
        &'a self,
        rel: &str,
        caller: &Caller,
        root: &'a Inode,
    ) -> Option<&'a IndexedDir> {
        let mut dir = self.dir("")?;
        let mut attrs = root;
        let mut at = 0;
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            if attrs.kind != FileKind::Directory || !allowed(attrs, caller, EXEC) {
                return None;
            }
            let i = dir
                .entries
                .binary_search_by(|e| e.name.as_str().cmp(part))
                .ok()?;
            attrs = dir.entries[i].inode.as_ref()?;
            at += part.len() + usize::from(at > 0);
            dir = self.dir(&rel[..at])?;
        }
        (attrs.kind == FileKind::Directory && allowed(attrs, caller, EXEC)).then_some(dir)
    }

    /// Directory `path`'s whole listing (the root or below) for `caller`, who may read it
    /// and search every directory down to it; `None`: ask the servers (also when a name
    /// in it has attributes only they know).
    #[must_use]
    pub fn listing<'a>(
        &'a self,
        path: &str,
        caller: &Caller,
        root: &'a Inode,
    ) -> Option<Listing<'a>> {
        let rel = below(&self.index.root, path)?;
        let dir = self.resolve_dir(rel, caller, root)?;
        let order = &self.order[*self.dirs.get(rel)?];
        let attrs = if rel.is_empty() {
            root
        } else {
            match self.lookup(path, caller, root) {
                Answer::Found(_, inode) => inode,
                _ => return None,
            }
        };
        let whole = dir.entries.iter().all(|e| e.inode.is_some());
        (whole && allowed(attrs, caller, READ)).then_some(Listing {
            entries: &dir.entries,
            order,
        })
    }

    /// The contents of regular file `entry` for `caller`, if the index holds them and
    /// the caller may read them.
    #[must_use]
    pub fn contents<'a>(entry: &'a IndexedEntry, caller: &Caller) -> Option<&'a [u8]> {
        let inode = entry.inode.as_ref()?;
        let data = entry.contents.as_deref()?;
        (inode.kind == FileKind::File
            && data.len() as u64 == inode.size
            && allowed(inode, caller, READ))
        .then_some(data)
    }
}

/// What the builder may put in a public index of a tree: a directory's listing only if
/// every user may list it (`o+rx`; its ancestors in the tree were checked on the way),
/// a file's contents only if every user may read it and it has one link, an entry's
/// attributes unless another name may change them (more than one link) or its extended
/// attributes are not readable by everyone.
pub mod public {
    use crate::{FileKind, Inode};

    #[must_use]
    pub fn listable(dir: &Inode) -> bool {
        dir.kind == FileKind::Directory && dir.mode & 0o005 == 0o005
    }

    #[must_use]
    pub fn attributes(inode: &Inode) -> bool {
        let linked = inode.kind != FileKind::Directory && inode.nlink > 1;
        let hidden_xattrs = !inode.xattrs.is_empty()
            && (inode.mode & 0o004 == 0
                || inode.xattrs.iter().any(|x| !x.name.starts_with("user.")));
        inode.kind != FileKind::HardLink && inode.link_home.is_none() && !linked && !hidden_xattrs
    }

    #[must_use]
    pub fn contents(inode: &Inode, inline_limit: u64) -> bool {
        inode.kind == FileKind::File
            && attributes(inode)
            && inode.mode & 0o004 != 0
            && inode.size <= inline_limit
    }
}

#[cfg(test)]
mod tests;
