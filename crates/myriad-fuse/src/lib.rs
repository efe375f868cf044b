//! Myriad as a mounted directory: a FUSE file system over the native client.
//!
//! The kernel names files by inode number, Myriad by path; `inodes` maps one to the other.
//! FUSE threads only unpack requests: each operation runs as a task on a tokio runtime and
//! replies from there, so no FUSE thread ever waits on the network. Permissions are checked
//! by the servers with each caller's uid, gid and groups. See docs/fuse.md for the semantics
//! (close-to-open, caching, what is not supported).
//!
//! Depends on: myriad-client, myriad-proto, myriad-placement, fuser. Must not depend on the
//! server or storage crates.

mod attr;
mod auto_index;
mod caller;
mod data_ops;
mod fs;
mod handles;
mod inodes;
mod kernel_ids;
mod kernel_names;
mod lock_ops;
mod mount;
mod mount_metrics;
mod recall;
mod written;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL};
use myriad_client::{Client, ClientConfig};
use myriad_placement::ClusterMap;
use myriad_proto::Caller;

/// How often a mount writing behind asks a server for a newer cluster map (the protocol
/// floor rises with no redirect to tell of it).
const MAP_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

pub use auto_index::AutoIndexing;
pub use mount::FsConfig;
use mount::Mount;

#[derive(Clone, Debug)]
pub struct MountConfig {
    pub map: ClusterMap,
    /// The cluster's client key or secret.
    pub keys: myriad_client::Keyring,
    /// The zone the mount is in (docs/zones.md; `""`: not known).
    pub zone: String,
    pub mountpoint: PathBuf,
    /// The directory of the file system shown as the mount's root: "/" for the whole
    /// file system, else an absolute normalized path (`mount h1:7401:/projects/a /mnt`).
    pub top: String,
    pub fs: FsConfig,
    /// A request to a dead or stuck server fails (EIO / ETIMEDOUT) after this long.
    pub request_timeout: Duration,
    /// FUSE threads reading requests from the kernel (each with its own /dev/fuse clone).
    pub fuse_threads: usize,
    /// Take requests over FUSE over io_uring, with this many entries per CPU's queue,
    /// when the kernel offers it (docs/fuse.md "FUSE over io_uring"); `None`: /dev/fuse.
    pub fuse_ring: Option<usize>,
    /// The ring was asked for by name (`--fuse-ring`): a warning, not a note in the log,
    /// when it cannot be had.
    pub fuse_ring_asked: bool,
    /// Let users other than the one who mounted use the mount (root mounts always do).
    pub allow_other: bool,
    /// Answer from the metadata indexes of frozen trees (docs/metadata-index.md); needs
    /// leases.
    pub indexes: bool,
    /// Where loaded indexes are kept on local disk.
    pub index_cache_dir: Option<std::path::PathBuf>,
    /// Build automatic indexes of trees read far more than changed (`None`: never).
    pub auto_index: Option<AutoIndexing>,
    /// Serve the mount's metrics over HTTP here (`GET /metrics`; docs/metrics.md).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// What the kernel enforces on the mount itself (`mount -o ro,nosuid,...`).
    pub kernel: KernelOptions,
}

/// Mount flags the kernel enforces (fstab's `ro`, `nosuid`, `nodev`, `noexec`), and the
/// source `mount` lists.
#[derive(Clone, Debug, Default)]
pub struct KernelOptions {
    /// Every write refused by the kernel (EROFS) before it reaches the mount.
    pub read_only: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
    /// Shown as the mount's source (`/proc/mounts`, `df`): the cluster's addresses, say.
    /// Default: "myriad".
    pub source: Option<String>,
}

/// The inode of the directory a mount shows as its root, or why it cannot be mounted.
/// Renaming or removing it later makes the mount's files unreachable (ENOENT), as an NFS
/// export's directory does (ESTALE).
async fn top_of(client: &Client, top: &str) -> Result<myriad_proto::InodeId, String> {
    if top == "/" {
        return Ok(myriad_proto::ROOT_INO);
    }
    myriad_proto::validate_path(top).map_err(|e| format!("cannot mount {top:?}: {e}"))?;
    let i = client
        .stat(top)
        .await
        .map_err(|e| format!("cannot mount {top}: {e}"))?;
    if i.kind != myriad_proto::FileKind::Directory {
        return Err(format!("cannot mount {top}: not a directory"));
    }
    Ok(i.ino)
}

/// Mounts and serves until unmounted (`myriad umount`, `umount`, SIGINT or SIGTERM).
/// `on_mounted` runs once the mount is live (used to detach a daemon).
pub fn mount(cfg: MountConfig, on_mounted: impl FnOnce()) -> Result<(), String> {
    if cfg.fs.zero_message_opens
        && (!cfg.kernel.read_only || !cfg.fs.leases || cfg.fs.writeback_cache)
    {
        // Writes need the handles opens make; with no open to check at, only leases and
        // the servers' sizes and times (which the writeback cache ignores) keep the
        // kernel's pages true.
        return Err(
            "--zero-message-opens needs --read-only and leases, and not \
                    --writeback-cache (docs/fuse.md \"Zero-message opens\")"
                .into(),
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("myriad-fuse")
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    let mut ccfg = ClientConfig::new(cfg.map.clone(), Caller::root(), cfg.keys.clone());
    ccfg.request_timeout = cfg.request_timeout;
    ccfg.zone = cfg.zone.clone();
    // Durability at fsync unless asked otherwise (docs/fuse.md "Durability").
    ccfg.durable_changes = cfg.fs.sync_close;
    // Names and attributes under directory leases (docs/fuse.md "Directory leases").
    ccfg.leases = cfg.fs.leases;
    ccfg.indexes = cfg.indexes && cfg.fs.leases;
    ccfg.index_cache_dir = cfg.index_cache_dir.clone();
    let client = Client::new(ccfg).map_err(|e| format!("bad cluster map: {e}"))?;
    rt.block_on(client.statfs())
        .map_err(|e| format!("cannot reach the cluster: {e}"))?;
    let top = rt.block_on(top_of(&client, &cfg.top))?;

    let inner = Arc::new(Mount::with_top(client, cfg.fs.clone(), &cfg.top, top));
    let fs = fs::MyriadFs {
        inner: inner.clone(),
        rt: rt.handle().clone(),
    };
    let mut options = Config::default();
    options.mount_options = mount_options(&cfg);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if cfg.allow_other || root {
        options.acl = SessionACL::All;
    }
    options.n_threads = Some(cfg.fuse_threads.max(1));
    options.clone_fd = true;
    if let Some(depth) = cfg.fuse_ring {
        options.uring = ring_config(depth, cfg.fuse_ring_asked, &inner);
    }
    let mut session = Session::new(fs, &cfg.mountpoint, &options)
        .map_err(|e| format!("cannot mount on {}: {e}", cfg.mountpoint.display()))?;
    let _ = inner.notifier.set(session.notifier());
    if let Some(addr) = cfg.metrics_listen {
        serve_metrics(&rt, &inner, addr)?;
    }
    lock_ops::start_renewal(&inner, rt.handle());
    lock_ops::start_keeping_open(&inner, rt.handle());
    // Changes answered once applied are held by the client until durable (and sent again
    // if their primary dies first): a barrier every second keeps what it holds short.
    lock_ops::every(
        &inner,
        rt.handle(),
        myriad_client::BARRIER_EVERY,
        |inner| async move {
            if inner.client.has_unsynced_changes()
                && let Some(e) = inner.client.sync_round().await
            {
                tracing::debug!("held changes not yet durable: {e}");
            }
        },
    );
    if cfg.fs.leases {
        recall::install(&inner);
    }
    if cfg.indexes && cfg.fs.leases {
        auto_index::start(
            &inner,
            rt.handle(),
            (cfg.map.clone(), cfg.keys.clone()),
            cfg.request_timeout,
            cfg.auto_index,
        )?;
    }
    if cfg.fs.write_behind && cfg.fs.leases && !cfg.fs.sync_close {
        // The client's senders of changes answered behind run on the mount's runtime.
        let weak = Arc::downgrade(&inner);
        let handle = rt.handle().clone();
        inner
            .client
            .set_behind_spawner(Arc::new(move |task: myriad_client::BehindTask| {
                if let Some(inner) = weak.upgrade() {
                    handle.spawn(async move { inner.client.run_behind(task).await });
                }
            }));
        // What the journals may hold follows the cluster's protocol floor (a mkdir is
        // answered behind only at 42), which rises without any request being redirected.
        let weak = Arc::downgrade(&inner);
        rt.spawn(async move {
            while let Some(inner) = weak.upgrade() {
                let client = inner.client.clone();
                drop(inner);
                client.check_map().await;
                tokio::time::sleep(MAP_CHECK_EVERY).await;
            }
        });
    }
    let mut unmounter = session.unmount_callable();
    let mountpoint = cfg.mountpoint.clone();
    rt.spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!(mountpoint = %mountpoint.display(), "signal: unmounting");
        if let Err(e) = unmounter.unmount() {
            tracing::warn!("unmount failed ({e}); detaching lazily");
            lazy_unmount(&mountpoint);
        }
    });
    on_mounted();
    let r = session
        .run()
        .map_err(|e| format!("FUSE session ended: {e}"));
    // The mount is gone: whatever still runs on the runtime (a request left by the kernel at
    // unmount, a retry under way) answers no one, so it is not waited for.
    tracing::info!("FUSE session ended; stopping");
    rt.shutdown_background();
    r
}

/// Detaches a mount now; the kernel finishes it when the last user lets go.
pub fn lazy_unmount(mountpoint: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) == 0 }
}

/// Unmounts `mountpoint`: as root by umount(2), otherwise with fusermount3 -u.
pub fn unmount(mountpoint: &std::path::Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| "mount point contains NUL".to_string())?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EPERM) {
        let st = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(mountpoint)
            .status()
            .map_err(|e| format!("cannot run fusermount3: {e}"))?;
        return if st.success() {
            Ok(())
        } else {
            Err(format!("fusermount3 -u {} failed", mountpoint.display()))
        };
    }
    Err(format!("cannot unmount {}: {err}", mountpoint.display()))
}

/// The kernel's mount options: what `mount` shows as the source, and the flags asked for.
fn mount_options(cfg: &MountConfig) -> Vec<MountOption> {
    // Mount options are comma-separated: a list of addresses is shown joined by ';'.
    let source = cfg
        .kernel
        .source
        .as_deref()
        .map(|s| s.replace(',', ";"))
        .filter(|s| !s.is_empty() && !s.contains([' ', '\t', '\n', '\\']))
        .unwrap_or_else(|| "myriad".into());
    let mut options = vec![
        MountOption::FSName(source),
        MountOption::Subtype("myriad".into()),
        MountOption::NoAtime,
        // The kernel checks permissions itself, from the attributes it holds, before it
        // asks: POSIX's exact rules and errors (EPERM vs EACCES, sticky directories, the
        // touch rule), with the caller's real groups, and also for what never reaches a
        // file system (opening a FIFO or a device). The servers check again with the same
        // rules, so a stale attribute can never grant more than the servers allow.
        MountOption::DefaultPermissions,
    ];
    for (on, opt) in [
        (cfg.kernel.read_only, MountOption::RO),
        (cfg.kernel.nosuid, MountOption::NoSuid),
        (cfg.kernel.nodev, MountOption::NoDev),
        (cfg.kernel.noexec, MountOption::NoExec),
    ] {
        if on {
            options.push(opt);
        }
    }
    options
}

/// FUSE over io_uring (the default, or `--fuse-ring`): as root, the kernel's
/// `fuse.enable_uring` is set first if it is off (it only lets connections that ask for
/// the ring use it). Where the ring cannot be had the mount says why: a warning if it was
/// `asked` by name, else a note (most kernels have no ring yet); INIT then does not ask
/// for it (`None`).
fn ring_config(depth: usize, asked: bool, inner: &Mount) -> Option<fuser::UringConfig> {
    use fuser::uring_wire::{ENABLE_PARAM, kernel_enabled, set_kernel_enabled, unavailable};
    let without = |why: String| {
        if asked {
            tracing::warn!("--fuse-ring: {why}: requests go over /dev/fuse");
        } else {
            tracing::info!("no FUSE over io_uring ({why}): requests go over /dev/fuse");
        }
    };
    if let Some(why) = unavailable() {
        without(why);
        return None;
    }
    if !kernel_enabled() {
        match set_kernel_enabled(true) {
            Ok(_) => tracing::info!("set {ENABLE_PARAM} to Y for FUSE over io_uring"),
            Err(e) => {
                without(format!("{ENABLE_PARAM} is off and could not be set ({e})"));
                return None;
            }
        }
    }
    Some(fuser::UringConfig {
        queue_depth: depth,
        requests: inner.metrics.ring_requests.clone(),
    })
}

/// Serves the mount's metrics (`GET /metrics`) at `addr` (`--metrics`).
fn serve_metrics(
    rt: &tokio::runtime::Runtime,
    inner: &Arc<Mount>,
    addr: std::net::SocketAddr,
) -> Result<(), String> {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
    let weak = Arc::downgrade(inner);
    let route: myriad_net::http::Route = Arc::new(move |path| match (path, weak.upgrade()) {
        ("/metrics", Some(inner)) => myriad_net::http::Reply::ok(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            inner.metrics.render(mount_metrics::ClientCounts {
                answered_locally: inner.client.answered_locally(),
                setattrs_in_creates: inner.client.setattrs_in_creates(),
                behind_passes: inner.client.behind_passes(),
            }),
        ),
        _ => myriad_net::http::Reply::text(404, "Myriad mount metrics: GET /metrics"),
    });
    rt.spawn(myriad_net::http::serve(listener, route));
    Ok(())
}
