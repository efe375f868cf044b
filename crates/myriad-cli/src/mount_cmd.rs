//! `myriad mount` and `myriad umount`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct MountArgs {
    /// Empty directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount this directory of the file system instead of its root (an absolute path;
    /// mount.myriad's `SERVER:PORT:/projects/a`). It must exist; users still need search
    /// permission on the directories above it. Renaming or removing it while mounted
    /// makes the mount's files unreachable (ENOENT) until it is mounted again.
    #[arg(long, value_name = "PATH", default_value = "/")]
    pub subdir: String,
    /// How long the kernel trusts a name -> inode answer (ms).
    #[arg(long, default_value_t = 1000)]
    pub entry_ttl_ms: u64,
    /// How long the kernel trusts attributes (ms). Opens always revalidate (close-to-open).
    #[arg(long, default_value_t = 1000)]
    pub attr_ttl_ms: u64,
    /// How long the kernel remembers that a name does not exist (ms; 0: never, so a file
    /// created by another client is visible at once).
    #[arg(long, default_value_t = 0)]
    pub negative_ttl_ms: u64,
    /// Let the kernel buffer writes and send them later (data reaches the servers at close,
    /// fsync or memory pressure). Only for a mount that is the only client of the files it
    /// touches: the kernel then keeps its own size and times of every file it knows and
    /// ignores the servers', so a file another mount or client changes keeps its old size
    /// here (docs/fuse.md, "The kernel's writeback cache"). Off by default.
    #[arg(long)]
    pub writeback_cache: bool,
    /// Turn extended attributes off: every xattr call fails with EOPNOTSUPP without asking
    /// the mount, which makes `ls -l` of cold directories about 5x faster (ls asks for
    /// two attributes of every file). user.* attributes are then unavailable.
    #[arg(long)]
    pub no_xattr: bool,
    /// Every change durable on all copies before it is answered, and `close` waiting for
    /// a file's bytes to be durable (the behaviour before issue 19). By default changes are
    /// answered once applied on their primary (the servers make them durable within about
    /// a millisecond) and `fsync`, `fdatasync`, `fsyncdir` and unmount wait for durability
    /// and report EIO for a change a failover may have lost (docs/fuse.md "Durability").
    #[arg(long)]
    pub sync_close: bool,
    /// Directory leases (the default; kept for scripts that name it): this mount keeps
    /// the names, attributes and missing names of directories it reads under leases the
    /// servers recall before anyone else changes them, answers lookups and stats from them
    /// without asking, and lets the kernel keep them until the lease is dropped, so that
    /// repeated stats and opens cost no request and other clients' changes are still seen
    /// at once (docs/fuse.md "Directory leases").
    #[arg(long, overrides_with = "no_leases")]
    pub leases: bool,
    /// No directory leases: names and attributes are kept for the TTLs above and asked
    /// again after (another client's change may be seen that much later).
    #[arg(long)]
    pub no_leases: bool,
    /// No write-behind: every create, write, setattr and unlink waits for its server's
    /// answer. By default, inside a directory this mount holds alone (an exclusive lease:
    /// nobody else has read or changed it since), those are answered at once and sent
    /// behind in batches, in order; anyone else's access to the directory first gets
    /// everything sent, `fsync` waits for it, and an error found when a change is applied
    /// is returned by the next `fsync` or `close` of the file (docs/fuse.md
    /// "Write-behind"). Off with --sync-close or --no-leases too.
    #[arg(long)]
    pub no_write_behind: bool,
    /// Do not answer from metadata indexes. By default, below a tree frozen and indexed
    /// with `myriad index build`, this mount loads the tree's index once and answers
    /// lookups, stats, listings, readlinks and reads of small files from it with no
    /// server request (docs/metadata-index.md). Off with --no-leases too.
    #[arg(long)]
    pub no_index: bool,
    /// Where loaded indexes are kept on local disk, so the next mount reads them from
    /// there. Default: $XDG_CACHE_HOME/myriad/index, else ~/.cache/myriad/index.
    #[arg(long, value_name = "DIR")]
    pub index_cache_dir: Option<PathBuf>,
    /// Automatic indexes: every SECS seconds this mount asks the servers for trees read
    /// far more than changed and builds an automatic index of each (as `myriad index
    /// build --auto`: the tree stays writable, its first change unregisters the index;
    /// one build at a time in the cluster). Asked every SECS while this mount sends reads
    /// to the servers itself, else every sixth time. 0 turns it off; so do --no-index
    /// and --no-leases.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub auto_index_every: u64,
    /// A directory is hot once the servers saw it read this often in the last minute
    /// (listings and lookups by any client; a mount with leases reads a directory about
    /// once per lease) by at least two clients, or four times as often by one: a tree
    /// worth an index is read from several mounts, or hard by one.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub auto_index_min_reads: u64,
    /// A hot directory is quiet once unchanged this long; a tree is indexed when its hot
    /// directories are all quiet.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub auto_index_quiet_secs: u64,
    /// Threads reading FUSE requests from the kernel.
    #[arg(long, default_value_t = 4)]
    pub fuse_threads: usize,
    /// Serve the mount's metrics over HTTP at this address (`GET /metrics`, OpenMetrics:
    /// kernel requests by kind, getattr answered from a lease, the cache or a server,
    /// lookups answered locally; docs/metrics.md). Default: none.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Allow other users to use the mount (needs user_allow_other in /etc/fuse.conf unless
    /// mounting as root; root mounts always allow others, permissions are checked per user).
    #[arg(long)]
    pub allow_other: bool,
    /// Detach and run in the background once mounted; logs go to --log.
    #[arg(long)]
    pub daemon: bool,
    /// Log file for --daemon.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Mount read-only: the kernel refuses every change (EROFS).
    #[arg(long)]
    pub read_only: bool,
    /// With --read-only: the kernel opens and closes files without asking the mount, so
    /// a second read of a file costs one request (its close) instead of three. Limits
    /// (docs/fuse.md "Zero-message opens"): flock locks stay on this mount, and a file
    /// another client removes or replaces while it is open here can be read on for 30 s
    /// only. Needs leases; not with --writeback-cache.
    #[arg(long)]
    pub zero_message_opens: bool,
    /// Insist on FUSE over io_uring (the default: see --no-fuse-ring), and warn when it
    /// cannot be had (by default the mount then says so only in its log, at info).
    #[arg(long, conflicts_with = "no_fuse_ring")]
    pub fuse_ring: bool,
    /// Take the kernel's requests over /dev/fuse reads and writes. By default they come
    /// over FUSE over io_uring where the kernel has it (Linux 6.14+; about half the CPU per
    /// request, docs/fuse.md "FUSE over io_uring"): one queue per CPU, with
    /// --fuse-ring-depth entries to start; as root the mount sets the `fuse.enable_uring`
    /// module parameter if it is off. Without the kernel's support, or as another user
    /// with the parameter off, requests go over /dev/fuse.
    #[arg(long)]
    pub no_fuse_ring: bool,
    /// With --fuse-ring: entries per CPU's queue at the start, each 1 MiB of buffer. A
    /// request holds one until answered; when few are free the queue adds more, up to
    /// 1,024.
    #[arg(long, default_value_t = 32)]
    pub fuse_ring_depth: usize,
    /// Set-user-id and set-group-id bits are ignored on this mount (the kernel's nosuid).
    #[arg(long)]
    pub nosuid: bool,
    /// Device files on this mount cannot be opened (the kernel's nodev).
    #[arg(long)]
    pub nodev: bool,
    /// Programs on this mount cannot be run (the kernel's noexec).
    #[arg(long)]
    pub noexec: bool,
    /// What `mount` and `df` show as the mount's source (default: "myriad"; mount.myriad
    /// passes the cluster's addresses, shown joined by ';').
    #[arg(long, value_name = "TEXT")]
    pub source: Option<String>,
}

/// Whether `mountpoint` is a mount point now (per /proc/self/mountinfo).
pub fn is_mounted(mountpoint: &Path) -> bool {
    let abs = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = abs.to_string_lossy();
    info.lines().any(|l| {
        l.split_whitespace()
            .nth(4)
            .is_some_and(|p| unescape_mountinfo(p) == want)
    })
}

/// mountinfo writes space, tab, newline and backslash in paths as octal escapes (\040...).
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .and_then(|d| {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                u8::try_from(v).ok()
            });
        match (b[i], octal) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn run(
    args: MountArgs,
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let keys = crate::keys::client_keys(secret_file.as_deref(), cluster.as_deref())?;
    let map = crate::fs_cmds::load_map(cluster.as_deref(), &keys)?;
    let meta = std::fs::metadata(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    if !meta.is_dir() {
        bail!(
            "mount point {} is not a directory",
            args.mountpoint.display()
        );
    }
    if is_mounted(&args.mountpoint) {
        bail!("{} is already a mount point", args.mountpoint.display());
    }
    let top = subdir_path(&args.subdir)?;
    if args.daemon {
        return detach(&args, cluster.as_deref(), secret_file.as_deref(), timeout);
    }
    let cfg = myriad_fuse::MountConfig {
        zone: crate::identity::zone_in(&map),
        map,
        keys,
        mountpoint: args.mountpoint.clone(),
        top,
        fs: myriad_fuse::FsConfig {
            entry_ttl: Duration::from_millis(args.entry_ttl_ms),
            attr_ttl: Duration::from_millis(args.attr_ttl_ms),
            negative_ttl: Duration::from_millis(args.negative_ttl_ms),
            writeback_cache: args.writeback_cache,
            xattrs: !args.no_xattr,
            sync_close: args.sync_close,
            leases: !args.no_leases,
            write_behind: !args.no_write_behind && !args.no_leases && !args.sync_close,
            zero_message_opens: args.zero_message_opens,
        },
        request_timeout: timeout,
        fuse_threads: args.fuse_threads,
        fuse_ring: (!args.no_fuse_ring).then_some(args.fuse_ring_depth.max(1)),
        fuse_ring_asked: args.fuse_ring,
        allow_other: args.allow_other,
        indexes: !args.no_index && !args.no_leases,
        index_cache_dir: args.index_cache_dir.clone().or_else(default_index_cache),
        auto_index: (!args.no_index && !args.no_leases && args.auto_index_every > 0).then(|| {
            myriad_fuse::AutoIndexing {
                every: Duration::from_secs(args.auto_index_every),
                policy: myriad_client::AutoIndexPolicy {
                    min_reads: args.auto_index_min_reads,
                    quiet: Duration::from_secs(args.auto_index_quiet_secs),
                    ..myriad_client::AutoIndexPolicy::default()
                },
            }
        }),
        metrics_listen: args.metrics,
        kernel: myriad_fuse::KernelOptions {
            read_only: args.read_only,
            nosuid: args.nosuid,
            nodev: args.nodev,
            noexec: args.noexec,
            source: args.source.clone(),
        },
    };
    let shown = args.mountpoint.display().to_string();
    myriad_fuse::mount(cfg, || eprintln!("myriad: mounted on {shown}")).map_err(anyhow::Error::msg)
}

/// `--subdir` as the absolute, normalized path the servers take (`/a/b/` is `/a/b`).
fn subdir_path(given: &str) -> anyhow::Result<String> {
    if !given.starts_with('/') {
        bail!("--subdir must be an absolute path (got {given:?})");
    }
    let parts: Vec<&str> = given.split('/').filter(|p| !p.is_empty()).collect();
    let path = format!("/{}", parts.join("/"));
    myriad_client::proto::validate_path(&path)
        .map_err(|e| anyhow::anyhow!("--subdir {given:?}: {e}"))?;
    Ok(path)
}

/// `$XDG_CACHE_HOME/myriad/index`, else `~/.cache/myriad/index` (`None`: neither known).
fn default_index_cache() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("myriad").join("index"))
}

/// Starts this same command without --daemon in a new session, and returns once the mount
/// is live (or fails with the child's log if it never comes up).
fn detach(
    args: &MountArgs,
    cluster: Option<&Path>,
    secret_file: Option<&Path>,
    timeout: Duration,
) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("myriad-mount.log"));
    let out = std::fs::File::create(&log).with_context(|| format!("log {}", log.display()))?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    if let Some(c) = cluster {
        cmd.arg("--cluster").arg(c);
    }
    if let Some(k) = secret_file {
        cmd.arg("--secret-file").arg(k);
    }
    let zone = crate::identity::client_zone();
    if !zone.is_empty() {
        cmd.arg("--zone").arg(zone);
    }
    cmd.arg("--timeout-ms")
        .arg(timeout.as_millis().to_string())
        .arg("mount")
        .arg(&args.mountpoint)
        .arg("--subdir")
        .arg(&args.subdir)
        .arg("--entry-ttl-ms")
        .arg(args.entry_ttl_ms.to_string())
        .arg("--attr-ttl-ms")
        .arg(args.attr_ttl_ms.to_string())
        .arg("--negative-ttl-ms")
        .arg(args.negative_ttl_ms.to_string())
        .arg("--fuse-threads")
        .arg(args.fuse_threads.to_string())
        .arg("--fuse-ring-depth")
        .arg(args.fuse_ring_depth.to_string());
    if args.writeback_cache {
        cmd.arg("--writeback-cache");
    }
    if args.no_xattr {
        cmd.arg("--no-xattr");
    }
    if args.sync_close {
        cmd.arg("--sync-close");
    }
    if args.no_leases {
        cmd.arg("--no-leases");
    }
    if args.no_write_behind {
        cmd.arg("--no-write-behind");
    }
    if args.no_index {
        cmd.arg("--no-index");
    }
    if let Some(d) = &args.index_cache_dir {
        cmd.arg("--index-cache-dir").arg(d);
    }
    cmd.arg("--auto-index-every")
        .arg(args.auto_index_every.to_string())
        .arg("--auto-index-min-reads")
        .arg(args.auto_index_min_reads.to_string())
        .arg("--auto-index-quiet-secs")
        .arg(args.auto_index_quiet_secs.to_string());
    if args.allow_other {
        cmd.arg("--allow-other");
    }
    if let Some(m) = args.metrics {
        cmd.arg("--metrics").arg(m.to_string());
    }
    for (on, flag) in [
        (args.read_only, "--read-only"),
        (args.zero_message_opens, "--zero-message-opens"),
        (args.fuse_ring, "--fuse-ring"),
        (args.no_fuse_ring, "--no-fuse-ring"),
        (args.nosuid, "--nosuid"),
        (args.nodev, "--nodev"),
        (args.noexec, "--noexec"),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    if let Some(s) = &args.source {
        cmd.arg("--source").arg(s);
    }
    cmd.stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    // SAFETY: setsid is async-signal-safe; it detaches the child from our terminal.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the mount daemon")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if is_mounted(&args.mountpoint) {
            println!(
                "mounted on {} (pid {}, log {})",
                args.mountpoint.display(),
                child.id(),
                log.display()
            );
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("mount daemon exited ({st}): {}", text.trim());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    bail!("mount did not come up within 30 s (log {})", log.display())
}

/// Unmounts `mountpoint` once every change the mount answered is confirmed durable, or
/// reported lost (issue 49). The kernel's unmount returns at once and the mount process
/// then confirms its changes on its own, unwatched: so the changes are confirmed first,
/// through an fsync of the mount's root directory (the mount's `fsyncdir` makes every
/// change of the mount durable and answers EIO if some were lost). A loss is reported
/// and the mount is still unmounted, with a failure status.
pub fn umount(mountpoint: &Path) -> anyhow::Result<()> {
    if !is_mounted(mountpoint) {
        bail!("{} is not mounted", mountpoint.display());
    }
    let confirmed = confirm_changes(mountpoint);
    myriad_fuse::unmount(mountpoint).map_err(anyhow::Error::msg)?;
    confirmed
}

/// Every change of the mount at `mountpoint` durable, or an error saying some were lost.
fn confirm_changes(mountpoint: &Path) -> anyhow::Result<()> {
    let dir = match std::fs::File::open(mountpoint) {
        Ok(d) => d,
        // Not ours to open (another user's mount that root unmounts reads fine; a user
        // without search permission cannot): the mount confirms its changes as it ends.
        Err(e) => {
            eprintln!(
                "myriad umount: {} not opened ({e}): its changes are confirmed by the mount as it ends",
                mountpoint.display()
            );
            return Ok(());
        }
    };
    dir.sync_all().map_err(|e| {
        anyhow::anyhow!(
            "{}: some changes this mount had answered could not be confirmed durable ({e}); they may be lost (the mount's log says which); unmounted anyway",
            mountpoint.display()
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn subdirectories_are_normalized_and_bad_ones_refused() {
        let ok = |s: &str| super::subdir_path(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(ok("/"), "/");
        assert_eq!(ok("//"), "/");
        assert_eq!(ok("/a/b/"), "/a/b");
        assert_eq!(ok("/a//b"), "/a/b");
        for bad in ["a/b", "", "/a/../b", "/./a"] {
            assert!(super::subdir_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            super::unescape_mountinfo(r"/mnt/my\040dir\134x"),
            r"/mnt/my dir\x"
        );
        assert_eq!(super::unescape_mountinfo("/plain"), "/plain");
        assert_eq!(super::unescape_mountinfo(r"/odd\9"), r"/odd\9");
        assert_eq!(
            super::unescape_mountinfo(r"/big\777"),
            r"/big\777",
            "no overflow"
        );
    }
}
