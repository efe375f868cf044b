//! User verbs: ls, stat, cat, put, get, mkdir, rm, mv, chmod, chown, ln -s, df.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use myriad_client::{
    Client, ClientConfig, ClusterMap, DirEntry, FileKind, FsError, Inode, RenameFlags,
};

use myriad_placement::join;

use crate::Command;
use crate::identity::current_caller;

/// Files copied concurrently by put/get.
const COPY_PARALLEL: usize = 32;
/// Piece size for streaming big files.
const COPY_PIECE_BYTES: usize = 4 * 1024 * 1024;

pub fn connect(
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<Client> {
    let keys = crate::keys::client_keys(secret_file.as_deref(), cluster.as_deref())?;
    client_with(cluster.as_deref(), keys, current_caller(), timeout)
}

/// A client of the cluster named by `cluster`, with `keys`, as `caller`, in this process's
/// zone.
fn client_with(
    cluster: Option<&std::path::Path>,
    keys: myriad_client::Keyring,
    caller: myriad_client::Caller,
    timeout: Duration,
) -> anyhow::Result<Client> {
    let map = load_map(cluster, &keys)?;
    let zone = crate::identity::zone_in(&map);
    let mut cfg = ClientConfig::new(map, caller, keys);
    cfg.request_timeout = timeout;
    cfg.zone = zone;
    Ok(Client::new(cfg)?)
}

/// `connect_admin` for a command that changes the cluster map (`admin`), else `connect`.
pub fn connect_for(
    admin: bool,
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<Client> {
    if admin {
        connect_admin(cluster, secret_file, timeout)
    } else {
        connect(cluster, secret_file, timeout)
    }
}

/// A client acting as the cluster's administrator: root, proving the cluster secret (the
/// servers take map changes only from that pair; SECURITY.md).
pub fn connect_admin(
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<Client> {
    let keys = crate::keys::client_keys(secret_file.as_deref(), cluster.as_deref())?;
    if !keys.has_cluster_secret() {
        bail!(
            "this needs the cluster secret (--secret-file or MYRIAD_SECRET_FILE): a client key cannot change the cluster"
        );
    }
    client_with(
        cluster.as_deref(),
        keys,
        myriad_client::Caller::root(),
        timeout,
    )
}

/// How long each server named by address in `--cluster` is given to hand over the map.
const SEED_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster map from `--cluster` / MYRIAD_CLUSTER (a map file, or servers' addresses
/// asked with `keys`), with a clear error if it is missing.
pub fn load_map(
    cluster: Option<&std::path::Path>,
    keys: &myriad_client::Keyring,
) -> anyhow::Result<ClusterMap> {
    let Some(path) = cluster else {
        bail!(
            "no cluster given: pass --cluster FILE or HOST:PORT[,HOST:PORT...], or set MYRIAD_CLUSTER (`myriad cluster up` prints it)"
        );
    };
    Ok(myriad_client::setup::load_cluster(
        path,
        keys,
        SEED_TIMEOUT,
    )?)
}

/// Makes a user-given remote path canonical: absolute, no empty, "." or ".." components.
pub fn normalize(path: &str) -> anyhow::Result<String> {
    if !path.starts_with('/') {
        bail!("remote paths must be absolute (start with '/'): {path}");
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

fn err(path: &str, e: FsError) -> anyhow::Error {
    anyhow::anyhow!("{path}: {e}")
}

pub async fn run(cmd: Command, client: &Client) -> anyhow::Result<()> {
    match cmd {
        Command::Ls { long, path } => ls(client, &normalize(&path)?, long).await,
        Command::Stat { path } => {
            let p = normalize(&path)?;
            let i = client.stat(&p).await.map_err(|e| err(&p, e))?;
            print_stat(&p, &i);
            Ok(())
        }
        Command::Cat { path } => cat(client, &normalize(&path)?).await,
        Command::Put { local, remote } => put(client, &local, &normalize(&remote)?).await,
        Command::Get { remote, local } => get(client, &normalize(&remote)?, &local).await,
        Command::Mkdir {
            parents,
            shards,
            path,
        } => {
            let p = normalize(&path)?;
            let r = match shards {
                Some(n) => {
                    if parents && p != "/" {
                        client
                            .mkdir_p(myriad_placement::parent_of(&p), 0o755)
                            .await
                            .map_err(|e| err(&p, e))?;
                    }
                    client.mkdir_sharded(&p, 0o755, n).await.map(|_| ())
                }
                None if parents => client.mkdir_p(&p, 0o755).await,
                None => client.mkdir(&p, 0o755).await.map(|_| ()),
            };
            r.map_err(|e| err(&p, e))
        }
        Command::Rm { recursive, path } => {
            let p = normalize(&path)?;
            if p == "/" {
                bail!("refusing to remove /");
            }
            if recursive {
                rm_r(client, &p).await
            } else {
                rm_one(client, &p).await
            }
        }
        Command::Mv { from, to } => {
            let (f, mut t) = (normalize(&from)?, normalize(&to)?);
            if let Ok(i) = client.stat(&t).await
                && i.kind == FileKind::Directory
            {
                let name = f.rsplit('/').next().unwrap_or_default();
                t = join(&t, name);
            }
            client
                .rename(&f, &t, RenameFlags::default())
                .await
                .map_err(|e| err(&f, e))
        }
        Command::Chmod { mode, path } => {
            let p = normalize(&path)?;
            let m = u32::from_str_radix(&mode, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .with_context(|| format!("bad mode {mode:?}: use octal like 755"))?;
            client
                .chmod(&p, m)
                .await
                .map(|_| ())
                .map_err(|e| err(&p, e))
        }
        Command::Chown { owner, path } => {
            let p = normalize(&path)?;
            let (u, g) = owner.split_once(':').unwrap_or((&owner, ""));
            let parse = |s: &str| -> anyhow::Result<Option<u32>> {
                if s.is_empty() {
                    Ok(None)
                } else {
                    Ok(Some(s.parse().with_context(|| {
                        format!("bad id {s:?}: use numeric UID[:GID]")
                    })?))
                }
            };
            client
                .chown(&p, parse(u)?, parse(g)?)
                .await
                .map(|_| ())
                .map_err(|e| err(&p, e))
        }
        Command::Ln {
            target,
            path,
            symbolic,
        } => {
            let p = normalize(&path)?;
            if symbolic {
                client.symlink(&target, &p).await.map(|_| ())
            } else {
                let t = normalize(&target)?;
                client.link(&t, &p).await.map(|_| ())
            }
            .map_err(|e| err(&p, e))
        }
        Command::Df => {
            let s = client.statfs().await?;
            println!("{:>14} {:>14} {:>14}", "size", "myriad used", "available");
            println!(
                "{:>14} {:>14} {:>14}",
                human(s.total_bytes),
                human(s.used_bytes),
                human(s.free_bytes)
            );
            for t in &s.tiers {
                println!("{}", tier_line(t));
            }
            Ok(())
        }
        _ => bail!("not a file system command"),
    }
}

/// One storage tier, summed over servers: disk size, the tier's store, free, and whether
/// (and how much) the fast tier overflowed.
pub(crate) fn tier_line(t: &myriad_client::TierStat) -> String {
    let mut line = format!(
        "  {:<9} {:>12} disk, {:>12} stored, {:>12} free",
        t.name,
        human(t.total_bytes),
        human(t.used_bytes),
        human(t.free_bytes)
    );
    if t.name == "fast" {
        line.push_str(&format!(
            "; {}, {} blocks overflowed to capacity, {} moved back",
            if t.overflowing {
                "past its high-water mark"
            } else {
                "below its high-water mark"
            },
            t.overflowed_blocks,
            t.moved_back_blocks
        ));
    }
    line
}

/// Bytes in base-2 units (whole bytes below 1 KiB).
pub(crate) fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

fn mode_string(i: &Inode) -> String {
    let t = match i.kind {
        FileKind::File | FileKind::HardLink => '-',
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
    };
    let mut s = String::from(t);
    for shift in [6, 3, 0] {
        let bits = (i.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn time_string(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let (y, m, d) = myriad_client::proto::trash::civil_date(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60
    )
}

fn long_line(name: &str, i: &Inode) -> String {
    let link = i
        .symlink_target
        .as_ref()
        .map(|t| format!(" -> {t}"))
        .unwrap_or_default();
    format!(
        "{} {:>3} {:>6} {:>6} {:>12} {} {name}{link}",
        mode_string(i),
        i.nlink,
        i.uid,
        i.gid,
        i.size,
        time_string(i.mtime_ns)
    )
}

async fn ls(client: &Client, path: &str, long: bool) -> anyhow::Result<()> {
    let inode = client.stat(path).await.map_err(|e| err(path, e))?;
    let mut out = std::io::stdout().lock();
    if inode.kind != FileKind::Directory {
        let name = path.rsplit('/').next().unwrap_or(path);
        writeln!(
            out,
            "{}",
            if long {
                long_line(name, &inode)
            } else {
                name.to_string()
            }
        )?;
        return Ok(());
    }
    let mut entries: Vec<DirEntry> = client.readdir(path).await.map_err(|e| err(path, e))?;
    // Listings come in hash order (docs/huge-dirs.md); people read names sorted, as ls does.
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    for e in entries {
        writeln!(
            out,
            "{}",
            if long {
                long_line(&e.name, &e.inode)
            } else {
                e.name
            }
        )?;
    }
    Ok(())
}

fn print_stat(path: &str, i: &Inode) {
    println!("  path: {path}");
    println!(
        "  kind: {:?}   inode: {:#x}   links: {}",
        i.kind, i.ino, i.nlink
    );
    println!(
        "  size: {}   mode: {:04o} ({})   uid: {}   gid: {}",
        i.size,
        i.mode,
        mode_string(i),
        i.uid,
        i.gid
    );
    println!(
        "access: {}   modify: {}   change: {}",
        time_string(i.atime_ns),
        time_string(i.mtime_ns),
        time_string(i.ctime_ns)
    );
    if let Some(t) = &i.symlink_target {
        println!("target: {t}");
    }
}

async fn cat(client: &Client, path: &str) -> anyhow::Result<()> {
    // Links are followed, as cat(1) follows them.
    let h = client.open_follow(path).await.map_err(|e| err(path, e))?;
    let mut out = std::io::stdout().lock();
    let mut off = 0u64;
    while off < h.inode.size {
        let piece = client
            .read(&h, off, COPY_PIECE_BYTES as u64)
            .await
            .map_err(|e| err(path, e))?;
        if piece.is_empty() {
            break;
        }
        off += piece.len() as u64;
        out.write_all(&piece)?;
    }
    Ok(())
}

/// Uploads one local file, replacing `remote` if it exists.
async fn put_file(client: &Client, local: &Path, remote: &str, mode: u32) -> anyhow::Result<u64> {
    let meta =
        std::fs::metadata(local).with_context(|| format!("cannot read {}", local.display()))?;
    let size = meta.len();
    if size <= COPY_PIECE_BYTES as u64 {
        let data =
            std::fs::read(local).with_context(|| format!("cannot read {}", local.display()))?;
        client
            .write_file(remote, mode, &data)
            .await
            .map_err(|e| err(remote, e))?;
        return Ok(size);
    }
    let h = match client.create(remote, mode, true, &[]).await {
        Ok(h) => h,
        Err(FsError::AlreadyExists) => {
            let h = client.open(remote).await.map_err(|e| err(remote, e))?;
            client.truncate(&h, 0).await.map_err(|e| err(remote, e))?;
            h
        }
        Err(e) => return Err(err(remote, e)),
    };
    use std::io::Read;
    let mut f = std::fs::File::open(local)?;
    let mut buf = vec![0u8; COPY_PIECE_BYTES];
    let mut off = 0u64;
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            let n = f.read(&mut buf[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        client
            .write(&h, off, &buf[..filled])
            .await
            .map_err(|e| err(remote, e))?;
        off += filled as u64;
    }
    Ok(off)
}

fn progress(total_files: u64) -> ProgressBar {
    let pb = ProgressBar::new(total_files);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg} [{elapsed_precise}]")
    {
        pb.set_style(style);
    }
    pb
}

async fn put(client: &Client, local: &Path, remote: &str) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(local)
        .with_context(|| format!("cannot read {}", local.display()))?;
    let base = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let target = match client.stat(remote).await {
        Ok(i) if i.kind == FileKind::Directory && !base.is_empty() => join(remote, &base),
        _ => remote.to_string(),
    };
    use std::os::unix::fs::PermissionsExt;
    if !meta.is_dir() {
        put_file(client, local, &target, meta.permissions().mode() & 0o7777).await?;
        return Ok(());
    }
    // Walk the tree: directories first (parents before children), then files in parallel.
    let mut dirs = vec![(local.to_path_buf(), target.clone())];
    let mut files = Vec::new();
    let mut links = Vec::new();
    let mut i = 0;
    while i < dirs.len() {
        let (ldir, rdir) = dirs[i].clone();
        let mut children: Vec<_> = std::fs::read_dir(&ldir)?.collect::<Result<_, _>>()?;
        children.sort_by_key(std::fs::DirEntry::file_name);
        for c in children {
            let name = c.file_name().to_string_lossy().into_owned();
            let ft = c.file_type()?;
            let r = join(&rdir, &name);
            if ft.is_dir() {
                dirs.push((c.path(), r));
            } else if ft.is_symlink() {
                links.push((std::fs::read_link(c.path())?, r));
            } else if ft.is_file() {
                files.push((c.path(), r, c.metadata()?.permissions().mode() & 0o7777));
            }
        }
        i += 1;
    }
    let pb = progress(files.len() as u64);
    for (_, r) in &dirs {
        client.mkdir_p(r, 0o755).await.map_err(|e| err(r, e))?;
    }
    for (t, r) in &links {
        match client.symlink(&t.to_string_lossy(), r).await {
            Ok(_) | Err(FsError::AlreadyExists) => {}
            Err(e) => return Err(err(r, e)),
        }
    }
    let client = Arc::new(client);
    let mut bytes = 0u64;
    let mut stream = futures::stream::iter(files.into_iter().map(|(l, r, m)| {
        let client = client.clone();
        async move { put_file(&client, &l, &r, m).await }
    }))
    .buffer_unordered(COPY_PARALLEL);
    while let Some(r) = stream.next().await {
        bytes += r?;
        pb.inc(1);
        pb.set_message(human(bytes));
    }
    pb.finish();
    eprintln!(
        "copied {} directories, {} files, {}",
        dirs.len(),
        pb.position(),
        human(bytes)
    );
    Ok(())
}

async fn get_file(client: &Client, remote: &str, local: &Path) -> anyhow::Result<u64> {
    let h = client
        .open_follow(remote)
        .await
        .map_err(|e| err(remote, e))?;
    let mut f = std::fs::File::create(local)
        .with_context(|| format!("cannot create {}", local.display()))?;
    let mut off = 0u64;
    while off < h.inode.size {
        let piece = client
            .read(&h, off, COPY_PIECE_BYTES as u64)
            .await
            .map_err(|e| err(remote, e))?;
        if piece.is_empty() {
            break;
        }
        off += piece.len() as u64;
        f.write_all(&piece)?;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(local, std::fs::Permissions::from_mode(h.inode.mode))?;
    Ok(off)
}

async fn get(client: &Client, remote: &str, local: &Path) -> anyhow::Result<()> {
    // The path given is followed if it is a link (as cp follows its arguments).
    let (real, inode) = client.resolve(remote).await.map_err(|e| err(remote, e))?;
    let base = remote.rsplit('/').next().unwrap_or_default().to_string();
    let target = if local.is_dir() && !base.is_empty() {
        local.join(&base)
    } else {
        local.to_path_buf()
    };
    if inode.kind != FileKind::Directory {
        get_file(client, &real, &target).await?;
        return Ok(());
    }
    let mut dirs = vec![(real, target)];
    let mut files = Vec::new();
    let mut i = 0;
    while i < dirs.len() {
        let (rdir, ldir) = dirs[i].clone();
        std::fs::create_dir_all(&ldir)?;
        for e in client.readdir(&rdir).await.map_err(|e| err(&rdir, e))? {
            let r = join(&rdir, &e.name);
            let l = ldir.join(&e.name);
            match e.inode.kind {
                FileKind::Directory => dirs.push((r, l)),
                FileKind::File | FileKind::HardLink => files.push((r, l)),
                FileKind::Symlink => {
                    if let Some(t) = e.inode.symlink_target {
                        let _ = std::fs::remove_file(&l);
                        std::os::unix::fs::symlink(t, &l)?;
                    }
                }
                // Metadata-only nodes have no contents to copy.
                FileKind::Fifo
                | FileKind::Socket
                | FileKind::CharDevice
                | FileKind::BlockDevice => {}
            }
        }
        i += 1;
    }
    let pb = progress(files.len() as u64);
    let mut stream = futures::stream::iter(
        files
            .into_iter()
            .map(|(r, l)| async move { get_file(client, &r, &l).await }),
    )
    .buffer_unordered(COPY_PARALLEL);
    let mut bytes = 0;
    while let Some(r) = stream.next().await {
        bytes += r?;
        pb.inc(1);
        pb.set_message(human(bytes));
    }
    pb.finish();
    Ok(())
}

async fn rm_one(client: &Client, path: &str) -> anyhow::Result<()> {
    match client.unlink(path).await {
        Err(FsError::IsADirectory) => client.rmdir(path).await.map_err(|e| err(path, e)),
        other => other.map_err(|e| err(path, e)),
    }
}

pub(crate) async fn rm_r(client: &Client, path: &str) -> anyhow::Result<()> {
    let inode = client.stat(path).await.map_err(|e| err(path, e))?;
    if inode.kind != FileKind::Directory {
        return rm_one(client, path).await;
    }
    // Depth-first: collect the tree, remove files in parallel, then directories bottom-up.
    let mut dirs = vec![path.to_string()];
    let mut files = Vec::new();
    let mut i = 0;
    while i < dirs.len() {
        let d = dirs[i].clone();
        for e in client.readdir(&d).await.map_err(|e| err(&d, e))? {
            let p = join(&d, &e.name);
            if e.inode.kind == FileKind::Directory {
                dirs.push(p)
            } else {
                files.push(p)
            }
        }
        i += 1;
    }
    let mut stream = futures::stream::iter(
        files
            .into_iter()
            .map(|p| async move { client.unlink(&p).await.map_err(|e| err(&p, e)) }),
    )
    .buffer_unordered(COPY_PARALLEL);
    while let Some(r) = stream.next().await {
        r?;
    }
    for d in dirs.iter().rev() {
        client.rmdir(d).await.map_err(|e| err(d, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_remote_paths() {
        assert_eq!(normalize("/").ok().as_deref(), Some("/"));
        assert_eq!(normalize("//a/./b/../c/").ok().as_deref(), Some("/a/c"));
        assert_eq!(normalize("/..").ok().as_deref(), Some("/"));
        assert!(normalize("relative").is_err());
    }

    #[test]
    fn formats_times_as_utc() {
        assert_eq!(time_string(0), "1970-01-01 00:00");
        assert_eq!(time_string(1_700_000_000_000_000_000), "2023-11-14 22:13");
    }
}
