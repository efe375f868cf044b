//! `myriad cluster add-node` and `remove-node`: a local cluster's servers added and
//! removed while it runs, waiting for the map to show it done.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use myriad_client::{Client, ClusterMap, NodeId};

use crate::cluster::{
    At, NodeState, admin_client, map_path, pid_is_server, read_state, signal, spawn_node,
    write_state,
};
use crate::cluster_status::moves_line;

/// How long `--wait` goes on without the map changing before it gives up (a move waits
/// for a server that is down, say); the cluster keeps trying in the background.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// Polls the newest map until `done` holds, printing progress when it changes; an error
/// if nothing changes for `STALL_LIMIT`.
async fn wait_for_map(
    client: &Client,
    what: &str,
    done: impl Fn(&ClusterMap) -> bool,
) -> anyhow::Result<ClusterMap> {
    let mut said = String::new();
    let (mut epoch, mut changed) = (0, Instant::now());
    loop {
        let map = client.newest_map().await;
        if done(&map) {
            return Ok(map);
        }
        if map.epoch != epoch {
            (epoch, changed) = (map.epoch, Instant::now());
        } else if changed.elapsed() > STALL_LIMIT {
            bail!(
                "{what}: no progress for {} s (epoch {}, {}); the cluster keeps trying, see `myriad cluster status`",
                STALL_LIMIT.as_secs(),
                map.epoch,
                moves_line(&map)
            );
        }
        let line = moves_line(&map);
        if line != said {
            println!("  {what}: epoch {}, {line}", map.epoch);
            said = line;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub(crate) async fn add_node(
    dir: &Path,
    weight: u32,
    zone: Option<String>,
    wait: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut st = read_state(dir)?;
    let client = admin_client(dir, timeout).await?;
    let map = client.map();
    let zone = match zone {
        Some(z) => z,
        None if map.zones().len() == 1 => map.zone_of(map.nodes[0].id).to_string(),
        None => bail!(
            "the cluster's servers are in zones {}: name the new server's with --zone",
            map.zones().into_iter().collect::<Vec<_>>().join(",")
        ),
    };
    let id = map
        .nodes
        .iter()
        .map(|n| n.id)
        .chain(st.nodes.iter().map(|n| n.id))
        .max()
        .map_or(NodeId(1), |n| NodeId(n.0 + 1));
    let listener = crate::local_ports::listener()?;
    let addr = listener.local_addr()?.to_string();
    let mut next = map.clone();
    next.epoch += 1;
    next.nodes.push(myriad_client::NodeInfo {
        id,
        addr: addr.clone(),
        weight,
        state: myriad_client::NodeState::Up,
        zone: zone.clone(),
    });
    next.validate()?;
    // The new server starts from a map that lists it (not committed yet: it serves nothing
    // until the group has committed it and its leader granted it a lease).
    std::fs::write(map_path(dir), next.to_json())?;
    let at = At {
        addr: &addr,
        netns: None,
    };
    let pid = spawn_node(dir, id, Some(listener), &at, &zone, &st.server_args)?;
    st.nodes.push(NodeState {
        id,
        pid,
        addr: addr.clone(),
        netns: None,
    });
    write_state(dir, &st)?;
    // Made again on the newest map if another change got in first.
    let added = next.nodes.last().cloned();
    crate::map_change::commit(
        &client,
        |m| {
            if m.node(id).is_some() {
                return Ok(None);
            }
            let mut n = m.clone();
            n.epoch += 1;
            n.nodes.extend(added.clone());
            n.validate()?;
            Ok(Some(n))
        },
        |now| now.node(id).is_some(),
    )
    .await
    .context("adding the server to the cluster map")?;
    println!("node {id} started on {addr} (pid {pid}) and added to the map");
    if wait {
        // Balanced: nothing moving and nothing left to move.
        let none = std::collections::BTreeSet::new();
        let map = wait_for_map(&client, "rebalancing", |m| {
            m.moves().is_empty() && m.plan_moves(&none, usize::MAX).is_none()
        })
        .await?;
        let held = map
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&id))
            .count();
        println!("node {id} holds {held} copies (epoch {})", map.epoch);
    } else {
        println!("copies move to it in the background: see `myriad cluster status`");
    }
    Ok(())
}

pub(crate) async fn remove_node(
    dir: &Path,
    id: NodeId,
    wait: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut st = read_state(dir)?;
    let client = admin_client(dir, timeout).await?;
    let map = client.map();
    if map.node(id).is_none() {
        bail!("node {id} is not in the cluster map (epoch {})", map.epoch);
    }
    crate::node_cmd::leave(&client, id).await?;
    println!("node {id} is leaving: its copies move to the other servers");
    if !wait {
        return Ok(());
    }
    let map = wait_for_map(&client, "draining", |m| m.node(id).is_none()).await?;
    println!("node {id} left the map (epoch {}); stopping it", map.epoch);
    if let Some(entry) = st.nodes.iter().find(|n| n.id == id)
        && pid_is_server(entry.pid)
    {
        signal(entry.pid, libc::SIGTERM);
    }
    st.nodes.retain(|n| n.id != id);
    write_state(dir, &st)?;
    Ok(())
}
