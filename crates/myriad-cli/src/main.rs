//! `myriad`: the one command users run. Thin: parses arguments, builds validated configs, and
//! calls the libraries. Exit codes: 0 ok, 1 user or file system error (one-line message on
//! stderr), 2 usage error.

mod bench;
mod bench_bindfs;
mod bench_capacity;
mod bench_failover;
mod bench_fuse;
mod bench_fuse_transport;
mod bench_ls;
mod bench_python;
mod bench_shared_dir;
mod bench_smallread;
mod bench_soak;
mod bench_spread;
mod bench_storm;
mod bench_stress;
mod bench_untar;
mod bench_zones;
mod cluster;
mod cluster_cmd;
mod cluster_nodes;
mod cluster_status;
mod cluster_view;
mod dashboard;
mod demo;
mod du_cmd;
mod fs_cmds;
mod fsck;
mod fsstats_cmd;
mod identity;
mod index_cmd;
mod join;
mod keys;
mod local_ports;
mod map_change;
mod mount_cmd;
mod mount_helper;
mod netns;
mod node_cmd;
mod node_lost;
mod plot;
mod policy_cmd;
mod quota_cmd;
mod s3_cmd;
mod server_cmd;
mod signals;
mod sigv4;
mod stress;
mod top;
mod trash_cmd;
mod tree_walk;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: the servers allocate and free many small buffers per request; glibc malloc cost
/// ~8% of CPU in the fetch profile (see BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "myriad",
    version,
    about = "Myriad: a distributed file system for huge numbers of small files"
)]
#[command(
    after_help = "Start here:\n  myriad demo                       bring up a 4-node local cluster, write and verify 20,000 small files\n  myriad cluster up --nodes 4 --data-dir /tmp/myr\n  export MYRIAD_CLUSTER=/tmp/myr/cluster.json\n  myriad put ./some/dir /dir && myriad ls -l /dir"
)]
struct Cli {
    /// The cluster: its map file (written by `cluster up`), or servers' addresses
    /// (`h1:7401,h2:7401`: the map is asked of any one that answers; then --secret-file
    /// names the key).
    #[arg(long, global = true, env = "MYRIAD_CLUSTER")]
    cluster: Option<PathBuf>,
    /// Request timeout in milliseconds: how long a request waits for an answer, retries
    /// included (with 3 copies a dead server's partitions fail over within about 3 s, 6-8 s if it led the cluster-map Raft group).
    #[arg(long, global = true, default_value_t = 20_000)]
    timeout_ms: u64,
    /// Key file: the cluster secret or a client key (SECURITY.md). Default: `cluster.secret`,
    /// else `client.key`, beside the cluster map file.
    #[arg(long, global = true, env = "MYRIAD_SECRET_FILE")]
    secret_file: Option<PathBuf>,
    /// The zone this client (or mount) is in (docs/zones.md): servers count traffic by
    /// zone, and reads go to a copy in this zone when one is in sync. Default: the zone
    /// of the servers whose (non-loopback) addresses are this host's, if one.
    #[arg(long, global = true, env = "MYRIAD_ZONE", value_parser = server_cmd::parse_zone)]
    zone: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one server node (data and metadata) in the foreground.
    ///
    /// SIGTERM is a planned stop: the server stops serving and marks itself down, so its
    /// copies take over at once (restart it with the same command: it rejoins and catches
    /// up). SIGINT (Ctrl-C) stops it at once; the others notice as after a crash.
    Server(Box<server_cmd::ServerArgs>),
    /// Start, stop and inspect a local multi-node cluster.
    #[command(subcommand)]
    Cluster(cluster::ClusterCmd),
    /// The servers of a cluster, from any host: list them, drain one, remove one gone for
    /// good (drain and remove need the cluster secret; docs/deploy.md).
    #[command(subcommand)]
    Node(node_cmd::NodeCmd),
    /// Bring up a 4-node local cluster, write 20,000 small files, read them back with fetch,
    /// verify every byte, and print throughput and requests per file.
    Demo(demo::DemoArgs),
    /// Benchmarks, each with its baseline measured in the same run. rpc, create, stat, fetch
    /// and all run against the cluster named by --cluster (or MYRIAD_CLUSTER) if given, else
    /// on a local cluster they start; the others always start their own.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Mount the cluster as a directory through FUSE (foreground; --daemon to detach).
    /// Unmount with `myriad umount`, `umount`, Ctrl-C or SIGTERM.
    ///
    /// POSIX semantics (docs/fuse.md): permissions are checked by the kernel
    /// (default_permissions) and again by the servers; close-to-open consistency between
    /// mounts, every earlier write visible within one; the mount is nodev, nosuid and
    /// noatime; fcntl and flock locks exclude across mounts; RENAME_EXCHANGE of
    /// directories and O_TMPFILE are not supported (EINVAL, EOPNOTSUPP).
    Mount(mount_cmd::MountArgs),
    /// Unmount a Myriad mount, once every change it answered is confirmed durable on
    /// the servers (or reported lost: then the exit status is 1). A plain `umount` returns
    /// at once and leaves the mount process to confirm them on its own.
    Umount { mountpoint: PathBuf },
    /// Serve the cluster over the S3 protocol (buckets are top-level directories, objects
    /// are files; keys with slashes are paths). SigV4 credentials come from a file.
    S3(s3_cmd::S3Args),
    /// Serve a status page of the cluster (servers and their health, map epoch and leader,
    /// load, disk, partitions moving, popular directories, recent errors), refreshing
    /// itself every 2 s; its data as JSON at `api/status`.
    Dashboard(dashboard::DashboardArgs),
    /// A live terminal view of the same as `dashboard` (q quits; --once prints one view).
    Top(top::TopArgs),
    /// List a directory (-l: with attributes).
    Ls {
        #[arg(short = 'l')]
        long: bool,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show a file's attributes.
    Stat { path: String },
    /// Print a file's contents.
    Cat { path: String },
    /// Copy a local file or directory (recursively) into Myriad.
    Put { local: PathBuf, remote: String },
    /// Copy a file or directory (recursively) out of Myriad.
    Get { remote: String, local: PathBuf },
    /// Create a directory (-p: with parents, no error if it exists).
    Mkdir {
        #[arg(short = 'p')]
        parents: bool,
        /// Create it split over N shards on different servers from the start (for a directory
        /// known to become huge; rounded up to a power of two, at most 256).
        #[arg(long, value_name = "N")]
        shards: Option<u32>,
        path: String,
    },
    /// Remove a file, symlink or empty directory (-r: a directory and everything under it).
    Rm {
        #[arg(short = 'r')]
        recursive: bool,
        path: String,
    },
    /// Rename a file, symlink or directory (into DIR if the target is a directory).
    Mv { from: String, to: String },
    /// Change permission bits (octal, e.g. 755).
    Chmod { mode: String, path: String },
    /// Change owner: UID, UID:GID or :GID (numeric).
    Chown { owner: String, path: String },
    /// Create a hard link PATH to the file TARGET (-s: a symbolic link PATH pointing to TARGET).
    Ln {
        #[arg(short = 's')]
        symbolic: bool,
        target: String,
        path: String,
    },
    /// Capacity and usage summed over all nodes.
    Df,
    /// Bytes a file or a tree holds (logical); with --raw, what storing them takes on the
    /// servers: every copy of the data with its checksums, and the metadata.
    Du(du_cmd::DuArgs),
    /// Powers-of-two histograms of file size, capacity used, directory size, file age,
    /// symlinks and hard links of any directory (local or a mount), as the Panasas
    /// fsstats tool prints them (--json, --plot FILE.png, --recommend a fast-tier size).
    Fsstats(fsstats_cmd::FsstatsArgs),
    /// Metadata indexes of read-only trees (docs/metadata-index.md): a shared software
    /// tree frozen and indexed once is answered by every mount with no server requests.
    #[command(subcommand)]
    Index(index_cmd::IndexCmd),
    /// Trees pinned to a zone (docs/zones.md): everything under a pinned path lives only on
    /// that zone's servers, so clients there never cross to another zone for it.
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCmd),
    /// Directory quotas (docs/quotas.md): a limit on the bytes and names a tree holds,
    /// with its usage kept exact by the servers as files change.
    #[command(subcommand)]
    Quota(quota_cmd::QuotaCmd),
    /// The trash (docs/trash.md): with `trash days N` every removed file is kept N days
    /// in /.trash, and listed, restored or purged here.
    #[command(subcommand)]
    Trash(trash_cmd::TrashCmd),
    /// Check the namespace below PATH (default /) while the cluster runs: every entry where
    /// placement puts it, shard maps agreeing, no orphan directory objects or data, no
    /// dangling entries, link counts and sizes right (docs/fsck.md). Read-only unless
    /// --repair; exits 1 if anything is (still) wrong. Needs root.
    Fsck {
        path: Option<String>,
        /// Fix what can be fixed safely, say what was done, and check again.
        #[arg(long)]
        repair: bool,
    },
}

/// No transparent huge pages for this process (and the servers it starts, which inherit
/// it). mimalloc returns freed memory in small pieces and touches fresh memory all the
/// time (memtables filling and flushing); under THP every first touch zeroes a whole 2 MiB
/// page: 12-16% of all CPU in a create profile, gone without THP (page faults then cost
/// under 5%). Same sitting, 5 runs of `bench all` each: create 4,502 -> 4,618/s, fetch
/// 44.6k -> 54.6k/s (medians). mimalloc's own switch (`allow_thp`) does this same prctl,
/// but only when set before its first allocation, i.e. from the environment.
fn no_transparent_huge_pages() {
    // SAFETY: prctl with integer arguments; it changes only this process's THP policy.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// The command line: this process's, or, started as `mount.myriad` by mount(8), the
/// `myriad mount` command its arguments stand for (`mount_helper.rs`).
fn command_line() -> Result<Cli, ExitCode> {
    if !mount_helper::invoked_as_helper() {
        return Ok(Cli::parse());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exe = std::env::current_exe()
        .map(std::ffi::OsString::from)
        .unwrap_or_else(|_| "myriad".into());
    match mount_helper::plan(exe, &args) {
        Ok(mount_helper::Plan::Mount(argv)) => Ok(Cli::parse_from(argv)),
        Ok(mount_helper::Plan::Fake) => Err(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("{e}");
            // mount(8)'s code for a usage or option error.
            Err(ExitCode::from(1))
        }
    }
}

fn main() -> ExitCode {
    no_transparent_huge_pages();
    let cli = match command_line() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MYRIAD_LOG").unwrap_or_else(|_| {
        let default = if matches!(cli.command, Command::Server(_) | Command::Mount(_)) {
            // openraft narrates every vote and heartbeat, and logs an error per retry to a dead
            // peer; membership.rs logs what matters (down, up, map changes). fuser's session
            // warns at every ordinary `umount` that it could not unmount again (the mount is
            // gone already: EINVAL); the mount logs its own end.
            "info,openraft=off,fuser::session=error"
        } else {
            "warn"
        };
        tracing_subscriber::EnvFilter::new(default)
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    identity::set_client_zone(cli.zone);
    let result = match cli.command {
        Command::Server(args) => server_cmd::run(*args, cli.secret_file),
        Command::Mount(args) => mount_cmd::run(
            args,
            cli.cluster,
            cli.secret_file,
            std::time::Duration::from_millis(cli.timeout_ms),
        ),
        Command::Umount { mountpoint } => mount_cmd::umount(&mountpoint),
        Command::Fsstats(args)
            if !args.kept
                && !args
                    .path
                    .as_deref()
                    .is_some_and(fsstats_cmd::is_myriad_path) =>
        {
            fsstats_cmd::run(&args)
        }
        other => {
            // `myriad cluster status | head` ends quietly, as other tools do, instead of
            // panicking on a closed stdout. (Sockets are written with MSG_NOSIGNAL, so
            // this reaches only pipes.) Servers, mounts and the commands that serve HTTP
            // until stopped (s3, dashboard) keep the ignored default: a service must
            // never die of a peer or a pipe going away.
            if !matches!(other, Command::S3(_) | Command::Dashboard(_)) {
                // SAFETY: setting a signal disposition before any thread is started.
                unsafe {
                    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                }
            }
            run_client_command(other, cli.cluster, cli.secret_file, cli.timeout_ms)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("myriad: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The cluster map file's name as the dashboard shows it.
fn cluster_name(cluster: Option<&std::path::Path>) -> String {
    cluster.map(|p| p.display().to_string()).unwrap_or_default()
}

fn run_client_command(
    cmd: Command,
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout_ms: u64,
) -> anyhow::Result<()> {
    let rt = runtime()?;
    let timeout = std::time::Duration::from_millis(timeout_ms);
    rt.block_on(async move {
        match cmd {
            Command::Cluster(c) => cluster_cmd::run(c, cluster, secret_file, timeout).await,
            Command::Node(c) => {
                let client = match c {
                    node_cmd::NodeCmd::List => fs_cmds::connect(cluster, secret_file, timeout)?,
                    _ => fs_cmds::connect_admin(cluster, secret_file, timeout)?,
                };
                node_cmd::run(c, &client).await
            }
            Command::Demo(a) => demo::run(a).await,
            Command::Bench(b) => {
                let target = bench::Target {
                    cluster,
                    secret_file,
                    timeout,
                };
                bench::run(b, target).await
            }
            Command::Fsck { path, repair } => {
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                let root = fs_cmds::normalize(path.as_deref().unwrap_or("/"))?;
                if fsck::run(&client, &root, repair).await? {
                    Ok(())
                } else {
                    anyhow::bail!("fsck {root}: the namespace is not consistent")
                }
            }
            Command::Index(c) => {
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                index_cmd::run(c, &client).await
            }
            Command::Policy(c) => {
                let admin = c.changes_the_map();
                let client = fs_cmds::connect_for(admin, cluster, secret_file, timeout)?;
                policy_cmd::run(c, &client).await
            }
            Command::Quota(c) => {
                let admin = c.changes_the_map();
                let client = fs_cmds::connect_for(admin, cluster, secret_file, timeout)?;
                quota_cmd::run(c, &client).await
            }
            Command::Trash(c) => {
                let admin = c.changes_the_map();
                let client = fs_cmds::connect_for(admin, cluster, secret_file, timeout)?;
                trash_cmd::run(c, &client).await
            }
            Command::Dashboard(a) => {
                let name = cluster_name(cluster.as_deref());
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                dashboard::run(a, client, name).await
            }
            Command::Top(a) => {
                let name = cluster_name(cluster.as_deref());
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                top::run(a, client, name).await
            }
            Command::S3(a) => {
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                s3_cmd::run(a, client).await
            }
            Command::Du(a) => {
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                du_cmd::run(&a, &client).await
            }
            Command::Fsstats(a) => {
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                if a.kept {
                    fsstats_cmd::run_kept(&a, &client).await
                } else {
                    fsstats_cmd::run_native(&a, &client).await
                }
            }
            other => {
                let client = fs_cmds::connect(cluster, secret_file, timeout)?;
                fs_cmds::run(other, &client).await
            }
        }
    })
}
