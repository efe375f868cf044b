//! `myriad fsck [PATH] [--repair]`: an online consistency check of the namespace below PATH
//! (docs/fsck.md). Read-only unless `--repair`. It reads every node's raw state (directory
//! objects and their shards, entries, which inodes have blocks) and checks it against
//! placement and against itself. The cluster keeps serving meanwhile, so anything an
//! operation in flight could explain is skipped, and a problem is reported only if a second
//! pass a moment later finds it again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use myriad_client::InodeId;
use myriad_client::proto::AdminRequest;
use myriad_client::proto::ask;
use myriad_client::proto::reply::{CodedChunks, FragmentsKept, FsckBlocks, FsckDirs, FsckEntries};
use myriad_client::proto::{
    FsckDir, FsckEntry, FsckRepair, Request, Response, ShardMap, name_hash,
};
use myriad_client::{Client, FileKind, FsError, NodeId, PartitionId};
use myriad_placement::{Ring, join, parent_of};

/// Problems of the copies themselves (not of the namespace they hold).
const COPY_PROBLEMS: [&str; 6] = [
    "corrupt record",
    "corrupt block",
    "bad fragment",
    "copy differs from its primary",
    "unreachable copy",
    "under-replicated partition",
];

/// Where fsck looks for hard-linked inode objects (`myriad-server` `INODE_DIR`).
const INODE_DIR: &str = "//i";
/// Where files unlinked while open wait with their data (`myriad-server` `ORPHAN_DIR`).
const ORPHAN_DIR: &str = "//o";

/// The reserved directories, which no path names: not part of the namespace's checks.
fn reserved(path: &str) -> bool {
    path == INODE_DIR || path == ORPHAN_DIR
}
const PAGE: u32 = 1024;
/// Bytes per stored block (`myriad-storage` `BLOCK_BYTES`).
const BLOCK_BYTES: u64 = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Problem {
    kind: &'static str,
    what: String,
    /// A safe repair and the node that makes it.
    repair: Option<(PartitionId, FsckRepair)>,
}

#[derive(Default)]
struct Pass {
    problems: Vec<Problem>,
    dirs: usize,
    split_dirs: usize,
    shards: usize,
    entries: u64,
    in_flight: u64,
    link_inodes: usize,
    data_inodes: usize,
    partitions: usize,
    copies: usize,
}

/// Runs fsck; `Ok(true)` if the namespace is (now) consistent.
pub async fn run(client: &Client, root: &str, repair: bool) -> anyhow::Result<bool> {
    client.newest_map().await;
    let first = match check(client, root, true).await {
        Err(e) if e.downcast_ref::<FsError>() == Some(&FsError::PermissionDenied) => {
            bail!(
                "fsck reads every node's raw state and needs root (uid 0) with the cluster secret"
            )
        }
        other => other?,
    };
    let mut problems = first.problems.clone();
    if !problems.is_empty() {
        // Online: keep only what a second look confirms.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = check(client, root, false).await?;
        let again: BTreeSet<(&str, &str)> = second
            .problems
            .iter()
            .map(|p| (p.kind, p.what.as_str()))
            .collect();
        problems.retain(|p| again.contains(&(p.kind, p.what.as_str())));
    }
    // A damaged record hides what it holds from the walk: its file's blocks would look
    // orphaned, its directory object unnamed. Only the copies' problems count until the
    // records are repaired (then the next pass checks the namespace again).
    let damaged = problems.iter().any(|p| p.kind == "corrupt record");
    if damaged {
        problems.retain(|p| COPY_PROBLEMS.contains(&p.kind));
        println!(
            "damaged metadata records found: the namespace checks wait until they are repaired"
        );
    }
    print_summary(root, client, &first, problems.len());
    for p in &problems {
        println!("  {}: {}", p.kind, p.what);
    }
    if problems.is_empty() {
        return Ok(true);
    }
    if !repair {
        println!("run with --repair to fix what can be fixed safely");
        return Ok(false);
    }
    let mut left = 0;
    for p in &problems {
        match &p.repair {
            Some((node, r)) => match client
                .request(
                    *node,
                    myriad_client::proto::Request::Admin(AdminRequest::FsckRepair(r.clone())),
                )
                .await
            {
                Ok(_) => println!("  repaired: {}: {} ({r:?} on node {node})", p.kind, p.what),
                Err(e) => {
                    left += 1;
                    println!("  NOT repaired: {}: {}: {e}", p.kind, p.what);
                }
            },
            None => {
                left += 1;
                println!("  not repairable automatically: {}: {}", p.kind, p.what);
            }
        }
    }
    let after = check(client, root, false).await?;
    println!(
        "after repair: {} problem(s) ({left} could not be repaired)",
        after.problems.len()
    );
    Ok(after.problems.is_empty())
}

fn print_summary(root: &str, client: &Client, p: &Pass, problems: usize) {
    println!(
        "fsck {root}: {} nodes, {} partitions ({} copies checked), {} directories ({} split into {} shards), {} entries, {} hard-linked inodes, {} inodes with data",
        client.map().nodes.len(),
        p.partitions,
        p.copies,
        p.dirs,
        p.split_dirs,
        p.shards,
        p.entries,
        p.link_inodes,
        p.data_inodes
    );
    if p.in_flight > 0 {
        println!(
            "skipped {} item(s) with an operation in flight",
            p.in_flight
        );
    }
    println!(
        "{}",
        if problems == 0 {
            "clean".to_string()
        } else {
            format!("{problems} problem(s):")
        }
    );
}

fn problem(kind: &'static str, what: String, repair: Option<(PartitionId, FsckRepair)>) -> Problem {
    Problem { kind, what, repair }
}

fn under(root: &str, path: &str) -> bool {
    root == "/" || path == root || path.starts_with(&format!("{root}/"))
}

async fn ask(client: &Client, node: PartitionId, req: Request) -> anyhow::Result<Response> {
    Ok(client.request(node, req).await?)
}

/// A copy's last applied batch, key count and digest.
type CopyDigest = (Option<u64>, u64, u64);

/// Every partition has as many copies as the map asks for its group (capped by the servers
/// that may hold them: a pinned group's zone), and every copy holds exactly what its
/// primary holds.
async fn check_replicas(client: &Client, pass: &mut Pass) {
    let map = client.map();
    for part in &map.partitions {
        pass.partitions += 1;
        let holders = map
            .nodes
            .iter()
            .filter(|n| map.may_hold(part, n.id))
            .count();
        let want = (map.group_replication(part.group) as usize).min(holders);
        if part.replicas.len() < want {
            pass.problems.push(problem(
                "under-replicated partition",
                format!(
                    "partition {}: {} of {want} copies ({:?})",
                    part.id,
                    part.replicas.len(),
                    part.replicas
                ),
                None,
            ));
        }
        let mut primary: Option<(NodeId, CopyDigest)> = None;
        for &server in &part.replicas {
            pass.copies += 1;
            match client.replica_digest(server, part.id).await {
                Err(e) => pass.problems.push(problem(
                    "unreachable copy",
                    format!("partition {} on server {server}: {e}", part.id),
                    None,
                )),
                Ok((d, corrupt, corrupt_records)) => {
                    for (space, key) in corrupt_records {
                        pass.problems.push(problem(
                            "corrupt record",
                            format!(
                                "partition {} on server {server}: a metadata record (space {space}, key {}) fails its checksum",
                                part.id,
                                String::from_utf8_lossy(&key).replace('\0', "/")
                            ),
                            Some((part.id, FsckRepair::RepairRecord { space, key })),
                        ));
                    }
                    for (ino, block) in corrupt {
                        pass.problems.push(problem(
                            "corrupt block",
                            format!(
                                "partition {} on server {server}: block {block} of inode {ino} fails its checksum",
                                part.id
                            ),
                            Some((part.id, FsckRepair::RepairBlock { ino, block })),
                        ));
                    }
                    match &primary {
                    None => primary = Some((server, d)),
                    Some((p, pd)) if *pd != d => pass.problems.push(problem(
                        "copy differs from its primary",
                        format!(
                            "partition {}: server {server} has batch {:?} and {} keys, the primary (server {p}) batch {:?} and {} keys",
                            part.id, d.0, d.1, pd.0, pd.1
                        ),
                        None,
                    )),
                    Some(_) => {}
                    }
                }
            }
        }
    }
}

/// The fragments a server lists: (inode, chunk, index, generation) -> whether its checksum
/// holds.
type Fragments = HashMap<(InodeId, u64, u8, u32), bool>;

/// Every coded chunk has each of its fragments, of its generation and intact, on the
/// server its record names; fragments no record names are listed (docs/redundancy.md).
async fn check_fragments(client: &Client, pass: &mut Pass) -> anyhow::Result<()> {
    let map = client.map();
    let mut held: HashMap<NodeId, Fragments> = HashMap::new();
    for n in &map.nodes {
        let mut kept = Fragments::new();
        let mut after = None;
        loop {
            let kept_page = ask::fsck_fragments(after, PAGE);
            let page = match client.ask_server(n.id, kept_page).await {
                Ok(FragmentsKept(page)) => page,
                Err(e @ FsError::Protocol(_)) => return Err(e.into()),
                // An unreachable server is reported with its copies; its fragments are
                // rebuilt elsewhere once it stays down past the grace.
                Err(_) => break,
            };
            for &(ino, chunk, index, generation, intact) in &page {
                kept.insert((ino, chunk, index, generation), intact);
            }
            match page.last() {
                Some(&(ino, chunk, index, generation, _)) if page.len() == PAGE as usize => {
                    after = Some((ino, chunk, index, generation));
                }
                _ => break,
            }
        }
        held.insert(n.id, kept);
    }
    let mut named = BTreeSet::new();
    for part in &map.partitions {
        let mut after = None;
        loop {
            let CodedChunks(page) = client
                .ask_partition(part.id, ask::fsck_coded(after, PAGE))
                .await?;
            for (ino, chunk, coded) in &page {
                let mut bad = Vec::new();
                for (i, server) in coded.servers.iter().enumerate() {
                    let index = u8::try_from(i).unwrap_or(u8::MAX);
                    let key = (*ino, *chunk, index, coded.generation);
                    named.insert((*server, key));
                    let Some(kept) = held.get(server) else {
                        continue; // unreachable now
                    };
                    match kept.get(&key) {
                        Some(true) => {}
                        Some(false) => {
                            bad.push(format!("{i} on server {server}: fails its checksum"))
                        }
                        None => bad.push(format!("{i} on server {server}: missing")),
                    }
                }
                if !bad.is_empty() {
                    pass.problems.push(problem(
                        "bad fragment",
                        format!(
                            "chunk {chunk} of inode {ino:#x}: fragment {}",
                            bad.join(", fragment ")
                        ),
                        Some((
                            part.id,
                            FsckRepair::RepairFragments {
                                ino: *ino,
                                chunk: *chunk,
                            },
                        )),
                    ));
                }
            }
            match page.last() {
                Some((ino, chunk, _)) if page.len() == PAGE as usize => {
                    after = Some((*ino, *chunk))
                }
                _ => break,
            }
        }
    }
    let ring = map.ring();
    for (server, kept) in &held {
        for key @ (ino, chunk, index, generation) in kept.keys() {
            if !named.contains(&(*server, *key)) {
                // Dropped by the chunk's primary once it has proved it orphan (a coding
                // in flight puts fragments before its record: only problems seen by two
                // passes are reported, and the primary checks again).
                pass.problems.push(problem(
                    "orphan fragment",
                    format!("fragment {index} (generation {generation:#x}) of chunk {chunk} of inode {ino:#x} on server {server}: no coded chunk names it"),
                    Some((
                        ring.owner_of_chunk(*ino, *chunk),
                        FsckRepair::DropOrphanFragment {
                            ino: *ino,
                            chunk: *chunk,
                            index: *index,
                            generation: *generation,
                            server: *server,
                        },
                    )),
                ));
            }
        }
    }
    Ok(())
}

/// Every directory's parts: the partitions holding one, with what each says of it.
type Dirs = BTreeMap<String, Vec<(PartitionId, FsckDir)>>;

/// What one pass learns from the entries, for the checks across directories after them.
#[derive(Default)]
struct Named {
    problems: Vec<Problem>,
    /// Directories whose placement is changing: not checked.
    busy_dirs: BTreeSet<String>,
    /// Directories named by an entry with an operation in flight (mkdir, rmdir, rename).
    pending_dirs: BTreeSet<String>,
    /// What the entries name: directories (path -> ino), link names per inode, files'
    /// data (ino -> node holding chunk 0, size).
    named_dirs: HashMap<String, InodeId>,
    link_names: HashMap<InodeId, u32>,
    files: HashMap<InodeId, (PartitionId, u64)>,
    entry_counts: HashMap<String, u64>,
}

/// One pass over everything below `root`.
async fn check(client: &Client, root: &str, show_progress: bool) -> anyhow::Result<Pass> {
    let map = client.map();
    let ring = map.ring();
    let full = root == "/";
    let mut pass = Pass::default();
    if full {
        check_replicas(client, &mut pass).await;
        check_fragments(client, &mut pass).await?;
    }
    let dirs = list_dirs(client, &map, root, full).await?;
    let mut named = Named::default();
    walk_entries(client, &ring, &dirs, show_progress, &mut pass, &mut named).await?;
    check_dir_objects(client, &ring, root, &dirs, &mut named).await;
    // Link counts and data: only a check of the whole tree sees every name and block.
    if full {
        check_links(client, &dirs, &mut pass, &mut named).await?;
        let c0 = map.chunk_size_bytes / BLOCK_BYTES;
        check_blocks(client, &map, c0, &mut pass, &mut named).await?;
    }
    let mut problems = named.problems;
    if pass.in_flight > 0 {
        // Names may be moving between nodes right now: counts of names and of data are not
        // trustworthy enough to act on.
        for p in &mut problems {
            if matches!(p.kind, "link count" | "orphan data") {
                p.repair = None;
            }
        }
    }
    problems.sort_by(|a, b| (a.kind, &a.what).cmp(&(b.kind, &b.what)));
    problems.dedup_by(|a, b| a.kind == b.kind && a.what == b.what);
    pass.problems.extend(problems);
    Ok(pass)
}

/// One page of the entries of `dir`'s part on `node`, after name `after`, and the name to
/// ask after next (`None`: the last page).
async fn entries_page(
    client: &Client,
    node: PartitionId,
    dir: &str,
    after: Option<String>,
) -> anyhow::Result<(Vec<FsckEntry>, Option<String>)> {
    let page = ask::fsck_entries(dir, after, PAGE);
    let FsckEntries { entries, next } = client.ask_partition(node, page).await?;
    Ok((entries, next))
}

/// 1. Every directory object on every node.
async fn list_dirs(
    client: &Client,
    map: &myriad_client::ClusterMap,
    root: &str,
    full: bool,
) -> anyhow::Result<Dirs> {
    let mut dirs: Dirs = BTreeMap::new();
    for n in &map.partitions {
        let mut after = None;
        loop {
            let FsckDirs(page) = client
                .ask_partition(n.id, ask::fsck_dirs(after.clone(), PAGE))
                .await?;
            let last = (page.len() == PAGE as usize)
                .then(|| page.last().map(|d| d.path.clone()))
                .flatten();
            for d in page {
                if under(root, &d.path) || (full && d.path == INODE_DIR) {
                    dirs.entry(d.path.clone()).or_default().push((n.id, d));
                }
            }
            match last {
                Some(l) => after = Some(l),
                None => break,
            }
        }
    }
    Ok(dirs)
}

/// 2. The entries of every part of every directory.
async fn walk_entries(
    client: &Client,
    ring: &Ring,
    dirs: &Dirs,
    show_progress: bool,
    pass: &mut Pass,
    named: &mut Named,
) -> anyhow::Result<()> {
    let Named {
        problems,
        busy_dirs,
        pending_dirs,
        named_dirs,
        link_names,
        files,
        entry_counts,
    } = named;
    let bar = if show_progress {
        let pb = ProgressBar::new(dirs.len() as u64);
        if let Ok(s) = ProgressStyle::with_template("{bar:40} {pos}/{len} directories {msg}") {
            pb.set_style(s);
        }
        pb
    } else {
        ProgressBar::hidden()
    };

    for (path, parts) in dirs {
        bar.inc(1);
        let busy = parts.iter().any(|(_, d)| d.busy);
        if busy {
            // Its placement is changing: not checked, but its names still count (they keep
            // their files' data and link counts alive).
            busy_dirs.insert(path.clone());
            pass.in_flight += 1;
        }
        if !reserved(path) {
            pass.dirs += 1;
            if !busy {
                shard_checks(ring, path, parts, pass, problems);
            }
        }
        // 2. Entries of every part.
        let mut seen = BTreeSet::new();
        for (node, d) in parts {
            let mut after = None;
            loop {
                let (entries, next) = entries_page(client, *node, path, after.clone()).await?;
                for e in entries {
                    *entry_counts.entry(path.clone()).or_default() += 1;
                    if e.pending
                        && e.inode
                            .as_ref()
                            .is_some_and(|i| i.kind == FileKind::Directory)
                    {
                        pending_dirs.insert(join(path, &e.name));
                    }
                    entry_checks(
                        path, *node, d, e, busy, &mut seen, pass, problems, named_dirs, link_names,
                        files,
                    );
                }
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
        }
    }
    bar.finish_and_clear();

    Ok(())
}

/// 3. Directory entries without their object, objects without their entry.
async fn check_dir_objects(
    client: &Client,
    ring: &Ring,
    root: &str,
    dirs: &Dirs,
    named: &mut Named,
) {
    let Named {
        problems,
        busy_dirs,
        pending_dirs,
        named_dirs,
        entry_counts,
        ..
    } = named;
    for (child, ino) in named_dirs.iter() {
        if busy_dirs.contains(child) || pending_dirs.contains(child) {
            continue;
        }
        let home = ring.owner_of_dir(child);
        let ok = dirs
            .get(child)
            .is_some_and(|parts| parts.iter().any(|(n, d)| *n == home && d.ino == *ino));
        if !ok {
            problems.push(problem(
                "dangling entry",
                format!("{child} (ino {ino:#x}) has no directory object on node {home}"),
                Some((
                    home,
                    FsckRepair::CreateDirObject {
                        path: child.clone(),
                        ino: *ino,
                    },
                )),
            ));
        }
    }
    for (path, parts) in dirs {
        if path == "/" || reserved(path) || busy_dirs.contains(path) {
            continue;
        }
        let ino = parts[0].1.ino;
        let named = if path == root {
            match client.stat(path).await {
                Ok(i) => i.kind == FileKind::Directory && i.ino == ino,
                Err(_) => false,
            }
        } else {
            named_dirs.get(path) == Some(&ino)
        };
        let parent_busy = busy_dirs.contains(parent_of(path));
        if !named && !parent_busy {
            let empty = entry_counts.get(path).copied().unwrap_or(0) == 0;
            for (node, d) in parts {
                problems.push(problem(
                    "orphan directory object",
                    format!(
                        "{path} (ino {:#x}) on node {node}: no entry names it{}",
                        d.ino,
                        if empty {
                            ""
                        } else {
                            " (not empty: left alone)"
                        }
                    ),
                    empty.then(|| {
                        (
                            *node,
                            FsckRepair::DropEmptyDirObject {
                                path: path.clone(),
                                ino: d.ino,
                            },
                        )
                    }),
                ));
            }
        }
    }
}

/// 4a. Link counts: every hard-linked inode's count against the names found.
async fn check_links(
    client: &Client,
    dirs: &Dirs,
    pass: &mut Pass,
    named: &mut Named,
) -> anyhow::Result<()> {
    let Named {
        problems,
        link_names,
        files,
        ..
    } = named;
    for (node, _) in dirs.get(INODE_DIR).into_iter().flatten() {
        let mut after = None;
        loop {
            let (entries, next) = entries_page(client, *node, INODE_DIR, after.clone()).await?;
            for e in entries {
                let Some(inode) = e.inode.filter(|_| !e.pending) else {
                    pass.in_flight += 1;
                    continue;
                };
                pass.link_inodes += 1;
                files.insert(inode.ino, (*node, inode.size));
                let names = link_names.get(&inode.ino).copied().unwrap_or(0);
                if names != inode.nlink {
                    problems.push(problem(
                        "link count",
                        format!(
                            "inode {:#x} on node {node}: link count {}, {names} name(s) found",
                            inode.ino, inode.nlink
                        ),
                        Some((
                            *node,
                            FsckRepair::SetLinks {
                                ino: inode.ino,
                                nlink: names,
                            },
                        )),
                    ));
                }
            }
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    Ok(())
}

/// 4b. Data: every inode with blocks has a file, and chunk 0's blocks are where it is.
async fn check_blocks(
    client: &Client,
    map: &myriad_client::ClusterMap,
    c0: u64,
    pass: &mut Pass,
    named: &mut Named,
) -> anyhow::Result<()> {
    let Named {
        problems, files, ..
    } = named;
    for n in &map.partitions {
        let mut after = None;
        loop {
            let FsckBlocks(page) = client
                .ask_partition(n.id, ask::fsck_blocks(after, PAGE))
                .await?;
            for &(ino, first) in &page {
                pass.data_inodes += 1;
                match files.get(&ino) {
                    None => problems.push(problem(
                        "orphan data",
                        format!("inode {ino:#x} has blocks on node {} but no file", n.id),
                        Some((n.id, FsckRepair::DropBlocks { ino, from_block: 0 })),
                    )),
                    Some(&(home, size)) if home == n.id => {
                        let end = size.div_ceil(BLOCK_BYTES);
                        if end < c0 {
                            let req = AdminRequest::FsckBlockFrom { ino, block: end };
                            if let Response::Block(Some(b)) =
                                ask(client, n.id, myriad_client::proto::Request::Admin(req)).await?
                                && b < c0
                            {
                                problems.push(problem(
                                    "data beyond size",
                                    format!(
                                        "inode {ino:#x} (size {size}) has block {b} on node {}",
                                        n.id
                                    ),
                                    None,
                                ));
                            }
                        }
                    }
                    Some(&(home, _)) => {
                        if first < c0 {
                            problems.push(problem(
                                "misplaced data",
                                format!(
                                    "inode {ino:#x}: chunk-0 block {first} on node {}, its file is on node {home}",
                                    n.id
                                ),
                                None,
                            ));
                        }
                    }
                }
            }
            match page.last() {
                Some(&(ino, _)) if page.len() == PAGE as usize => after = Some(ino),
                _ => break,
            }
        }
    }
    Ok(())
}

/// The parts of directory `path` agree with its home's shard map and with placement.
fn shard_checks(
    ring: &Ring,
    path: &str,
    parts: &[(PartitionId, FsckDir)],
    pass: &mut Pass,
    problems: &mut Vec<Problem>,
) {
    let home = ring.owner_of_dir(path);
    let Some((_, home_part)) = parts.iter().find(|(n, _)| *n == home) else {
        let on: Vec<String> = parts.iter().map(|(n, _)| n.to_string()).collect();
        problems.push(problem(
            "shard without its home",
            format!(
                "{path}: parts on node(s) {} but none on its home node {home}",
                on.join(",")
            ),
            None,
        ));
        return;
    };
    if parts.iter().any(|(_, d)| d.ino != home_part.ino) {
        problems.push(problem(
            "shard inode mismatch",
            format!("{path}: its parts disagree on the directory's inode"),
            None,
        ));
    }
    let map = home_part.map.clone().unwrap_or_else(ShardMap::unsplit);
    if map.is_split() {
        pass.split_dirs += 1;
    }
    pass.shards += map.leaves.len();
    if !map.is_well_formed() {
        problems.push(problem(
            "bad shard map",
            format!("{path}: the home's map does not cover the hash space: {map:?}"),
            None,
        ));
        return;
    }
    let mut held = BTreeSet::new();
    for (node, d) in parts {
        for s in &d.shards {
            if !s.is_valid() {
                problems.push(problem(
                    "bad shard",
                    format!("{path}: node {node} holds an impossible shard {s:?}"),
                    None,
                ));
                continue;
            }
            held.insert(*s);
            let owner = ring.owner_of_shard(path, *s);
            if !map.leaves.contains(s) || owner != *node {
                problems.push(problem(
                    "shard maps disagree",
                    format!(
                        "{path}: node {node} holds shard {} (map v{} places {} on node {owner})",
                        s.label(),
                        map.version,
                        if map.leaves.contains(s) {
                            "it"
                        } else {
                            "no such leaf"
                        }
                    ),
                    None,
                ));
            }
        }
    }
    for leaf in &map.leaves {
        if !held.contains(leaf) {
            problems.push(problem(
                "shard missing",
                format!(
                    "{path}: shard {} of the map is on no node (should be node {})",
                    leaf.label(),
                    ring.owner_of_shard(path, *leaf)
                ),
                None,
            ));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn entry_checks(
    path: &str,
    node: PartitionId,
    part: &FsckDir,
    e: FsckEntry,
    busy: bool,
    seen: &mut BTreeSet<String>,
    pass: &mut Pass,
    problems: &mut Vec<Problem>,
    named_dirs: &mut HashMap<String, InodeId>,
    link_names: &mut HashMap<InodeId, u32>,
    files: &mut HashMap<InodeId, (PartitionId, u64)>,
) {
    if path == INODE_DIR {
        return; // Inode objects are checked with the link counts.
    }
    if path == ORPHAN_DIR {
        // Files unlinked while open: their data is theirs until the partition drops them.
        if let Some(inode) = e.inode {
            files.insert(inode.ino, (node, inode.size));
        }
        return;
    }
    let Some(inode) = e.inode else {
        pass.in_flight += 1;
        return;
    };
    // Every name counts for what it keeps alive; only settled ones are checked.
    match inode.kind {
        FileKind::Directory => {
            named_dirs.insert(join(path, &e.name), inode.ino);
        }
        FileKind::HardLink if !e.pending => *link_names.entry(inode.ino).or_default() += 1,
        FileKind::File => {
            files.insert(inode.ino, (node, inode.size));
        }
        _ => {}
    }
    if e.pending || busy {
        pass.in_flight += 1;
        return;
    }
    pass.entries += 1;
    let hash = name_hash(&e.name);
    if !part.shards.iter().any(|s| s.is_valid() && s.contains(hash)) {
        problems.push(problem(
            "misplaced entry",
            format!(
                "{}: on node {node}, in no shard it holds",
                join(path, &e.name)
            ),
            None,
        ));
    }
    if !seen.insert(e.name.clone()) {
        problems.push(problem(
            "duplicate entry",
            format!("{}: listed by more than one node", join(path, &e.name)),
            None,
        ));
    }
}
