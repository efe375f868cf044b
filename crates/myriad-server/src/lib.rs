//! The Myriad server: one process is one node and serves both data and metadata (FPFS OSD+).
//!
//! ```text
//! TCP ─> myriad-net serve_connection ─> Node::dispatch ─┬─ reads: Store directly
//!                                                       ├─ mutations: Applier (one writer, group commit)
//!                                                       └─ two-node ops: twophase (intents + recovery)
//! ```
//! Must not depend on: the client, FUSE, the CLI.

mod ancestors;
mod applier;
mod config;
mod counters;
mod fsck;
mod intent;
mod links;
mod mutation;
mod node;
mod perm;
mod popularity;
mod shards;
mod split;
mod twophase;
#[cfg(test)]
mod workload_rng;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};

use myriad_net::{Pool, PoolConfig, serve_connection};
use myriad_proto::PeerKind;
use myriad_storage::{FjallKv, Kv, Store};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use ancestors::ReplicationConfig;
pub use config::{DEFAULT_DIR_SPLIT_ENTRIES, ServerConfig};

use crate::applier::Applier;
use crate::mutation::{IdAlloc, Layout, Mutation};
use crate::node::{MapState, Node, now_ns};

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
}

/// Runs a node on `listener` until `shutdown` completes.
pub async fn run(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), ServerError> {
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
    std::fs::create_dir_all(&config.data_dir)?;
    let store_err = |source| ServerError::Store {
        path: config.data_dir.display().to_string(),
        source,
    };
    let kv: Arc<dyn Kv> =
        Arc::new(FjallKv::open(&config.data_dir.join("store")).map_err(store_err)?);
    let store = Store::open(kv, config.node_id).map_err(store_err)?;
    let store_fresh = store.is_fresh();
    let ids = IdAlloc::load(&store, config.node_id).map_err(store_err)?;
    let layout = Layout {
        chunk_size_bytes: config.map.chunk_size_bytes,
    };
    let (changed, _) = watch::channel(0u64);
    let applier = Applier::start(store.clone(), ids, layout, changed.clone())?;
    let ring = config.map.ring();
    let pool = Pool::new(PoolConfig {
        me: PeerKind::Server {
            node_id: config.node_id,
        },
        connect_timeout: config.connect_timeout,
        request_timeout: config.request_timeout,
    });
    let node = Arc::new(Node {
        me: config.node_id,
        store,
        applier,
        map: RwLock::new(Arc::new(MapState {
            map: config.map.clone(),
            ring,
        })),
        map_path: config.map_path.clone(),
        data_dir: config.data_dir.clone(),
        pool,
        counters: Default::default(),
        changed,
        config: config.clone(),
        live: Mutex::new(HashSet::new()),
        replicas: ancestors::Replicas::new(config.replication.clone(), !store_fresh),
        shard_maps: myriad_placement::ShardCache::default(),
        splits: split::SplitState::default(),
    });

    if node.state().ring.owner_of_dir("/") == node.me {
        node.applier
            .run(Mutation::InitRoot {
                now: now_ns(),
                uid: config.root_uid,
                gid: config.root_gid,
            })
            .await
            .map_err(|e| ServerError::Config(e.to_string()))?;
    }

    let rec = node.clone();
    let recovery = tokio::spawn(async move {
        let mut seen = rec.recover(&HashSet::new(), true).await;
        loop {
            tokio::time::sleep(rec.config.recovery_interval).await;
            seen = rec.recover(&seen, false).await;
        }
    });

    let keeper = node.clone();
    let bookkeeping = tokio::spawn(async move {
        loop {
            tokio::time::sleep(keeper.bookkeeping_interval()).await;
            keeper.replica_bookkeeping().await;
        }
    });

    tracing::info!(node = node.me, addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, node.clone()));
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    recovery.abort();
    bookkeeping.abort();
    tracing::info!(node = node.me, "shutting down");
    let _ = node.store.sync();
    Ok(())
}
