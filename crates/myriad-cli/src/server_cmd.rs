use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use myriad_placement::ClusterMap;
use myriad_server::ServerConfig;

#[derive(Args)]
pub struct ServerArgs {
    /// Directory for this node's store (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// Address to listen on, e.g. 127.0.0.1:7401. Defaults to this node's address in the map.
    #[arg(long)]
    listen: Option<String>,
    /// Cluster map file (JSON). A newer map received from a peer is written back to it.
    #[arg(long)]
    cluster_map: PathBuf,
    /// This node's id in the map. Defaults to the node whose address equals --listen.
    #[arg(long)]
    node_id: Option<u32>,
    /// Listen on an inherited, already bound socket (used by `cluster up`).
    #[arg(long, hide = true)]
    listen_fd: Option<i32>,
    /// Deadline of one server-to-server request, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    request_timeout_ms: u64,
    /// Worker threads of this node's runtime.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

pub fn run(args: ServerArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.cluster_map)
        .with_context(|| format!("cannot read cluster map {}", args.cluster_map.display()))?;
    let map = ClusterMap::from_json(&text)
        .with_context(|| format!("bad cluster map {}", args.cluster_map.display()))?;
    let node_id = match (args.node_id, &args.listen) {
        (Some(id), _) => id,
        (None, Some(l)) => map
            .nodes
            .iter()
            .find(|n| &n.addr == l)
            .map(|n| n.id)
            .with_context(|| format!("no node in the map listens on {l}; pass --node-id"))?,
        (None, None) => bail!("pass --node-id or --listen"),
    };
    let node = map
        .node(node_id)
        .with_context(|| format!("node id {node_id} is not in the cluster map"))?
        .clone();
    let mut config = ServerConfig::new(node_id, args.data_dir, map);
    config.map_path = Some(args.cluster_map);
    config.request_timeout = Duration::from_millis(args.request_timeout_ms);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = match args.listen_fd {
            Some(fd) => {
                use std::os::fd::FromRawFd;
                // SAFETY: `cluster up` passes exactly one bound listening socket at this fd,
                // and nothing else in this process owns it.
                let std_listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
                std_listener.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(std_listener)?
            }
            None => {
                let addr = args.listen.unwrap_or(node.addr);
                tokio::net::TcpListener::bind(&addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr}"))?
            }
        };
        let shutdown = async {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return std::future::pending().await,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        };
        myriad_server::run(listener, config, shutdown).await?;
        Ok(())
    })
}
