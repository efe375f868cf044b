//! `myriad cluster ...`: each subcommand to the module doing it (the local cluster in
//! `cluster.rs`, servers added and removed in `cluster_nodes.rs`, status in
//! `cluster_status.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::bail;
use myriad_client::{ClusterMap, NodeId};

use crate::cluster::{
    At, ClusterCmd, LocalCluster, NodeOptions, down, map_path, pid_is_server, read_state,
    spawn_node, write_state,
};
use crate::cluster_nodes::{add_node, remove_node};
use crate::cluster_status::zone_label;

pub async fn run(
    cmd: ClusterCmd,
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Up {
            nodes,
            data_dir,
            root_owner,
            metrics,
            replication,
            security,
            tiers,
            layout,
            zones,
        } => {
            let mut opts = NodeOptions::for_current_user();
            opts.layout = layout;
            opts.zones = zones;
            if let Some(o) = root_owner {
                opts.root_owner = o;
            }
            opts.server_args = replication.to_args();
            opts.server_args.extend(security.to_args());
            opts.server_args.extend(tiers.to_args());
            if metrics {
                opts.server_args.push("--metrics=127.0.0.1:0".into());
            }
            let c = LocalCluster::up(&data_dir, nodes, &opts).await?;
            let map = map_path(&data_dir);
            println!(
                "Myriad cluster of {nodes} nodes is up (map epoch {}):",
                c.map.epoch
            );
            for n in &c.map.nodes {
                println!(
                    "  node {}  {}{}  data {}",
                    n.id,
                    n.addr,
                    zone_label(&n.zone),
                    data_dir.join(format!("node-{}", n.id)).display()
                );
            }
            println!(
                "\nUse it:\n  export MYRIAD_CLUSTER={}\n  myriad ls -l /\n  myriad cluster status\nStop it:\n  myriad cluster down --data-dir {}",
                map.display(),
                data_dir.display()
            );
            Ok(())
        }
        ClusterCmd::Init {
            secret_file,
            client_key_file,
        } => {
            let client = client_key_file.unwrap_or_else(|| {
                secret_file
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join(crate::keys::CLIENT_KEY_FILE)
            });
            crate::keys::init(&secret_file, &client)?;
            println!(
                "cluster secret: {} (servers: --secret-file; keep it on servers and admin hosts)\nclient key:     {} (client machines: --secret-file or MYRIAD_SECRET_FILE)",
                secret_file.display(),
                client.display()
            );
            Ok(())
        }
        ClusterCmd::Down { data_dir } => {
            down(&data_dir)?;
            println!("cluster in {} is down", data_dir.display());
            Ok(())
        }
        ClusterCmd::StartNode { data_dir, node } => {
            let node = NodeId(node);
            let mut st = read_state(&data_dir)?;
            let server_args = st.server_args.clone();
            let Some(entry) = st.nodes.iter_mut().find(|n| n.id == node) else {
                bail!("no node {node} in this cluster")
            };
            if pid_is_server(entry.pid) {
                bail!("node {node} is already running (pid {})", entry.pid);
            }
            let zone = ClusterMap::from_json(&std::fs::read_to_string(map_path(&data_dir))?)?
                .zone_of(node)
                .to_string();
            let at = At {
                addr: &entry.addr,
                netns: entry.netns.as_deref(),
            };
            entry.pid = spawn_node(&data_dir, node, None, &at, &zone, &server_args)?;
            let pid = entry.pid;
            write_state(&data_dir, &st)?;
            println!("node {node} started (pid {pid})");
            Ok(())
        }
        ClusterCmd::AddNode {
            data_dir,
            weight,
            wait,
            zone,
        } => add_node(&data_dir, weight, zone, wait, timeout).await,
        ClusterCmd::RemoveNode {
            data_dir,
            node,
            no_wait,
        } => remove_node(&data_dir, NodeId(node), !no_wait, timeout).await,
        ClusterCmd::Status => crate::cluster_status::status(cluster, secret_file, timeout).await,
        ClusterCmd::ResetCounters => {
            let client = crate::fs_cmds::connect(cluster, secret_file, timeout)?;
            client.reset_counters().await?;
            println!("counters reset on every node");
            Ok(())
        }
    }
}
