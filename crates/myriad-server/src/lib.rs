//! The Myriad server: one process is one node and serves both data and metadata (FPFS OSD+).
//!
//! ```text
//! TCP ─> myriad-net serve_connection ─> Host (host.rs) ─> the target partition's
//!                                        Partition::dispatch ─┬─ reads: Store directly
//!                                                       ├─ mutations: Applier (one writer, group commit)
//!                                                       └─ two-node ops: twophase (intents + recovery)
//! ```
//! Must not depend on: the client, FUSE, the CLI.

mod backoff;
mod clock;
mod cluster;
mod commit;
mod config;
mod counters;
pub mod embed;
mod health;
mod host;
mod host_copy_reads;
mod host_env;
mod host_fragments;
mod host_quotas;
mod host_serve;
mod membership;
mod metrics;
mod metrics_http;
mod partition;
mod recalls;
mod replication;
mod seams;
mod space;
mod state;
mod step_down;
#[cfg(test)]
mod test_disk;
mod tiers;
mod unpoisoned;

use std::sync::Arc;

use myriad_net::{Pool, PoolConfig, ServeConfig, accept_loop};
use myriad_proto::PeerKind;
use myriad_storage::{Kv, PartitionKv, Store};
use tokio::net::TcpListener;

pub use config::{
    DEFAULT_ANTI_ENTROPY_INTERVAL, DEFAULT_DIR_SPLIT_ENTRIES, DEFAULT_DOWN_GRACE,
    DEFAULT_TRASH_EXPIRY_INTERVAL, ReplicationConfig, ServerConfig, TierConfig,
};
pub use space::DEFAULT_RESERVE_BYTES;

use crate::cluster::MapState;
use crate::commit::{Runner, Syncer};
use crate::host::{Host, HostParts, OpenError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("cannot open the store in {path}: {source}")]
    Store {
        path: String,
        source: myriad_storage::StorageError,
    },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// An fsync failed: what it covered may be lost, and nothing written since can be
    /// trusted to be durable, so the server stops (its partitions fail over to their copies)
    /// rather than go on without acknowledging writes.
    #[error(
        "the disk failed an fsync ({0}); this server stopped so that its partitions fail over to their copies. Check the disk (dmesg, free space), then start the server again: it catches up from its copies"
    )]
    DiskFailed(String),
}

/// How a server is asked to stop (`run`'s `shutdown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// A planned stop of this one server (SIGTERM: systemd, a container, a rolling restart):
    /// it stops serving, then marks itself down through the cluster-map group, so its
    /// partitions' copies take over at once rather than after the failure detector's wait
    /// (`step_down::hand_over`); bounded, and skipped when no other server is up.
    HandOver,
    /// Stop at once (SIGINT: Ctrl-C, `cluster down` stopping every server together): the
    /// others notice the silence as they would a crash.
    Now,
}

/// Refuses a configuration a server cannot run with: a map that does not validate, an id
/// the map does not list, a key file without the cluster secret.
fn check_config(config: &ServerConfig) -> Result<(), ServerError> {
    config
        .map
        .validate()
        .map_err(|e| ServerError::Config(e.to_string()))?;
    if config.map.node(config.node_id).is_none() {
        return Err(ServerError::Config(format!(
            "node id {} is not in the cluster map",
            config.node_id
        )));
    }
    if !config.keys.has_cluster_secret() {
        return Err(ServerError::Config(
            "a server needs the cluster secret (a `cluster:` line), not only a client key".into(),
        ));
    }
    Ok(())
}

/// Starts this server's member of the cluster-map Raft group; returns it and the queue of
/// the maps it commits.
async fn start_group(
    config: &ServerConfig,
    kv: &Arc<dyn Kv>,
    pool: &Arc<Pool>,
) -> Result<
    (
        myriad_membership::Group,
        tokio::sync::mpsc::UnboundedReceiver<myriad_placement::ClusterMap>,
    ),
    ServerError,
> {
    // The cluster-map Raft group, on the server's own records (partition 0). Every map it
    // commits reaches the host through `maps` (membership.rs). The one unbounded queue of
    // the server, on purpose: the host adopts every committed map in order (a partition
    // keeps serving only through maps that directly follow each other, host.rs), so none
    // may be dropped, and the group's state machine, which sends them, must not wait for
    // the host; map changes are rare (a few per failure or move), so it stays short.
    let (map_tx, maps) = tokio::sync::mpsc::unbounded_channel();
    let on_map: myriad_membership::OnMap = Arc::new(move |m| {
        let _ = map_tx.send(m);
    });
    let group = myriad_membership::Group::start(
        u64::from(config.node_id),
        Arc::new(PartitionKv::new(kv.clone(), 0)),
        Arc::new(membership::PoolTransport { pool: pool.clone() }),
        on_map,
    )
    .await
    .map_err(ServerError::Config)?;
    Ok((group, maps))
}

/// Runs a node on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = Stop>,
) -> Result<(), ServerError> {
    check_config(&config)?;
    std::fs::create_dir_all(&config.data_dir)?;
    let store_err = |source| ServerError::Store {
        path: config.data_dir.display().to_string(),
        source,
    };
    let stores = tiers::open(&config).map_err(store_err)?;
    let kv: Arc<dyn Kv> = stores.kv.clone();
    // The server's own records (partition 0): format version and server id, checked here.
    let _own = Store::open(Arc::new(PartitionKv::new(kv.clone(), 0)), config.node_id.0)
        .map_err(store_err)?;
    let syncer = Syncer::start(kv.clone(), Runner::Threads)?;
    let pool = Arc::new(Pool::new(PoolConfig {
        me: PeerKind::Server {
            node_id: config.node_id,
        },
        zone: config.map.zone_of(config.node_id).to_string(),
        keys: config.keys.clone(),
        connect_timeout: config.connect_timeout,
        request_timeout: config.request_timeout,
    }));
    let (group, maps) = start_group(&config, &kv, &pool).await?;
    // Start from the newest map known: the map file, or the one the group last applied.
    let mut map = config.map.clone();
    if let Some(m) = group.map()
        && m.epoch > map.epoch
        && m.node(config.node_id).is_some()
    {
        map = m;
    }
    let first_state = Arc::new(MapState::new(map.clone()));
    let (map_news, map_view) = tokio::sync::watch::channel(first_state);
    let membership = Arc::new(membership::Membership::new(
        config.node_id,
        group.clone(),
        pool.clone(),
        config.down_grace,
        map_view,
    ));
    let host = Host::assemble(HostParts {
        config: config.clone(),
        kv: kv.clone(),
        syncer,
        runner: Runner::Threads,
        clock: crate::clock::Clock::System,
        transport: pool.clone(),
        authority: membership.clone(),
        map_news,
        tiers: stores.tiered.clone(),
    });

    // Accept connections before opening partitions: a primary that restarted asks its
    // backups (which may be starting too) how far they got. Requests for partitions not yet
    // open get `Busy` and are retried.
    let handle = host.clone();
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let serve = ServeConfig {
        keys: config.keys.clone(),
        root_squash: config.root_squash,
        limits: config.limits.clone(),
    };
    let acceptor = tokio::spawn(accept_loop(listener, handle, serve));
    let first = map.clone();
    let boot = group.clone();
    tokio::spawn(async move {
        if let Err(e) = boot.bootstrap(&first).await {
            tracing::error!("cannot initialize the cluster-map Raft group: {e}");
        }
    });
    let mut tasks = membership::start_tasks(&membership);
    tasks.extend(host.start_tasks(maps));
    if let Some(addr) = config.metrics_listen {
        tasks.push(metrics_http::start(addr, &host, &config.data_dir).await?);
    }
    if let (Some(tiered), Some(t)) = (&stores.tiered, tiers::tier_config(&config)) {
        tasks.push(tiers::spawn_watch(tiered.clone(), t.clone()));
    }
    if let Ok(mut t) = host.tasks.lock() {
        t.extend(tasks);
    }
    tokio::pin!(shutdown);
    tokio::select! {
        _ = &mut shutdown => {
            acceptor.abort();
            host.clear();
            group.shutdown().await;
            return Ok(());
        }
        opened = host.reconcile() => if let Err(e) = opened {
            acceptor.abort();
            host.clear();
            group.shutdown().await;
            return Err(match e {
                OpenError::Store(source) => store_err(source),
                OpenError::Io(e) => ServerError::Io(e),
                OpenError::Fs(e) => ServerError::Config(e.to_string()),
            });
        },
    }
    tracing::info!(server = %host.id, partitions = host.nodes().len(), addr = %addr, "serving");
    let stop = tokio::select! {
        s = shutdown => Ok(s),
        e = host.syncer.failure() => Err(e),
    };
    acceptor.abort();
    let stop = match stop {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(server = %host.id, "stopping: the disk failed an fsync: {e}");
            // Its partitions' copies take over now, not after the detector's wait.
            host.step_down(step_down::Why::DiskFailed).await;
            group.shutdown().await;
            return Err(ServerError::DiskFailed(e));
        }
    };
    tracing::info!(server = %host.id, ?stop, "shutting down");
    let _ = host.kv.sync();
    // Serving ends first (partitions deposed, membership tasks ended: no lease asked for
    // again), so a copy made primary by the hand-over never serves beside this server.
    if stop == Stop::HandOver {
        host.step_down(step_down::Why::Stop).await;
    } else {
        host.clear();
    }
    group.shutdown().await;
    Ok(())
}
