//! `myriad node ...`: the servers of a cluster, administered from any host with the
//! cluster secret (issue 48, docs/deploy.md): list them; drain one (its copies move to
//! the others while it keeps serving, then it leaves the map); remove one that is gone for
//! good (its copies are made again from the others, and it leaves the map and the
//! cluster-map group); declare servers lost (`node_lost.rs`). `cluster remove-node` is
//! remove, plus stopping a local process.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use myriad_client::{Client, ClusterMap, NodeId, NodeState};

#[derive(Subcommand)]
pub enum NodeCmd {
    /// Every server in the cluster map: id, address, zone, state, copies and primaries
    /// held, copies still catching up.
    List,
    /// Move every copy off server ID while it keeps serving; once it holds none it leaves
    /// the cluster map (then stop it). --wait: until it has left.
    Drain {
        /// The server's id (`node list`).
        id: u32,
        /// Return only once the server has left the map (it gives up if the map does
        /// not change for 2 minutes; the drain goes on).
        #[arg(long)]
        wait: bool,
    },
    /// Remove server ID, gone for good (a dead disk or host): its copies are made again
    /// on the other servers from the copies they hold, and it leaves the cluster map. A
    /// server marked down keeps its copies until it has been down for the servers' grace
    /// period (--down-grace-secs): this waits for that first. --wait: until it has left.
    Remove {
        /// The server's id (`node list`).
        id: u32,
        /// Return only once the server has left the map (it gives up if the map does
        /// not change for 2 minutes; the removal goes on).
        #[arg(long)]
        wait: bool,
    },
    /// Declare servers lost for good, when some partition's in-sync copies were all on
    /// them (it served on those disks alone, and they died): such a partition is served
    /// again from a copy that was behind, and every change only the lost copies held is
    /// gone. Without --accept-loss it only prints what it would do. Partitions with an
    /// in-sync copy elsewhere, up or down, are left alone: waiting for it loses nothing.
    /// Afterwards run `myriad fsck`: names may point at files whose creation was lost.
    Lost {
        /// The servers' ids (`node list`), each marked down.
        #[arg(required = true)]
        ids: Vec<u32>,
        /// Make the change (without it: print what would be served again, from which copy,
        /// and what is lost).
        #[arg(long)]
        accept_loss: bool,
    },
}

/// How long a wait may see no change of the map before it gives up (the cluster goes on).
const STALL_LIMIT: Duration = Duration::from_secs(120);

pub async fn run(cmd: NodeCmd, client: &Client) -> anyhow::Result<()> {
    match cmd {
        NodeCmd::List => {
            let map = client.newest_map().await;
            let speaks = protocols(client, &map).await;
            print!("{}", list(&map, &speaks));
            Ok(())
        }
        NodeCmd::Drain { id, wait } => {
            let id = NodeId(id);
            let map = client.newest_map().await;
            if !map.is_up(id) {
                bail!(
                    "server {id} is not up: a server gone for good is removed (`myriad node \
                     remove {id}`), its copies made again from the others"
                );
            }
            leave(client, id).await?;
            println!("server {id} is draining: its copies move to the other servers");
            if wait {
                let m = wait_gone(client, id).await?;
                println!(
                    "server {id} left the cluster map (epoch {}): stop it now",
                    m.epoch
                );
            }
            Ok(())
        }
        NodeCmd::Lost { ids, accept_loss } => {
            let lost = ids.into_iter().map(NodeId).collect();
            crate::node_lost::run(client, &lost, accept_loss).await
        }
        NodeCmd::Remove { id, wait } => {
            let id = NodeId(id);
            leave(client, id).await?;
            println!("server {id} is being removed: its copies are made again on the others");
            if wait {
                let m = wait_gone(client, id).await?;
                println!("server {id} left the cluster map (epoch {})", m.epoch);
            }
            Ok(())
        }
    }
}

/// The protocol each server of `map` that answers within a second speaks with this
/// client (docs/upgrades.md: the cluster's floor rises once every server speaks more).
async fn protocols(client: &Client, map: &ClusterMap) -> BTreeMap<NodeId, u16> {
    let asks = map.nodes.iter().map(|n| async move {
        let v = tokio::time::timeout(Duration::from_secs(1), client.server_protocol(n.id)).await;
        (n.id, v.ok().flatten())
    });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .filter_map(|(id, v)| Some((id, v?)))
        .collect()
}

/// The servers of `map`, one line each, with the protocol each speaks (`speaks`; "-":
/// it did not answer).
#[must_use]
pub fn list(map: &ClusterMap, speaks: &BTreeMap<NodeId, u16>) -> String {
    let mut out = format!(
        "cluster map epoch {}, {} servers, {} partitions, {} copies each\n",
        map.epoch,
        map.nodes.len(),
        map.partitions.len(),
        map.replication
    );
    // docs/upgrades.md "The cluster's protocol floor".
    match map.ext.protocol_floor {
        0 => out.push_str("protocol floor: not set yet (no server refused for its version)\n"),
        f => out.push_str(&format!(
            "protocol floor: {f} (every server speaks it; one that does not is refused)\n"
        )),
    }
    out.push_str(&format!(
        "{:>4}  {:<24} {:<10} {:<8} {:>6} {:>9} {:>7} {:>8}\n",
        "id", "address", "zone", "state", "copies", "primaries", "behind", "protocol"
    ));
    for n in &map.nodes {
        let held = map.partitions.iter().filter(|p| p.replicas.contains(&n.id));
        let copies = held.clone().count();
        let behind = held.clone().filter(|p| p.is_behind(n.id)).count();
        let primaries = map.primaries_of(n.id).len();
        let state = match n.state {
            NodeState::Up => "up",
            NodeState::Down => "down",
            NodeState::Leaving => "leaving",
        };
        let zone = if n.zone.is_empty() { "-" } else { &n.zone };
        let protocol = speaks
            .get(&n.id)
            .map_or_else(|| "-".to_string(), u16::to_string);
        out.push_str(&format!(
            "{:>4}  {:<24} {:<10} {:<8} {:>6} {:>9} {:>7} {:>8}\n",
            n.id.0, n.addr, zone, state, copies, primaries, behind, protocol
        ));
    }
    out
}

/// Marks server `id` leaving, once the others can take its copies: R servers besides it
/// up and staying, and none of its partitions stranded (pinned to a zone with no room).
/// A server down with copies is first waited for until they were made elsewhere.
pub async fn leave(client: &Client, id: NodeId) -> anyhow::Result<ClusterMap> {
    let map = client.newest_map().await;
    if map.node(id).is_none() {
        bail!(
            "server {id} is not in the cluster map (epoch {})",
            map.epoch
        );
    }
    let staying = map
        .nodes
        .iter()
        .filter(|n| n.id != id && n.state == NodeState::Up)
        .count();
    if staying < map.replication as usize {
        bail!(
            "cannot remove server {id}: {staying} other servers are up and staying, and every \
             partition needs {} copies (add a server first)",
            map.replication
        );
    }
    if let Some(pid) = map.stranded_by_leaving(id) {
        let p = map.partition(pid);
        let zone = p.and_then(|p| map.pinned_zone(p));
        bail!(
            "cannot remove server {id}: partition {pid}{} has a copy on it and no other server \
             that may take one (add a server{} first)",
            zone.map_or(String::new(), |z| format!(" (pinned to zone {z})")),
            zone.map_or(String::new(), |z| format!(" in zone {z}"))
        );
    }
    let copies = copies_on(&map, id);
    // A partition whose only in-sync copies are on `id` has no primary to copy from: its
    // copies are never made elsewhere, and the wait below would not end.
    if let Ok(plan) = map.declare_lost(&std::collections::BTreeSet::from([id]))
        && let Some(pid) = plan
            .forced
            .iter()
            .map(|f| f.partition)
            .chain(plan.no_copy_up.iter().map(|(p, _)| *p))
            .next()
    {
        bail!(
            "cannot remove server {id} yet: partition {pid} has its only in-sync copies on it, \
             so nothing can copy them elsewhere. Bring it back, or accept losing what only it \
             held: `myriad node lost {id}` says what that loses"
        );
    }
    if map.node(id).is_some_and(|n| n.state == NodeState::Down) && copies > 0 {
        // Marked leaving now, it would count as up again: every primary would take it back
        // as a backup and writes would wait for it. Its copies are made again on the
        // others while it stays down (past the servers' grace period); then it leaves
        // holding nothing.
        println!(
            "server {id} is down and holds {copies} copies: the servers make them again on \
             the others once it has been down for their grace period (--down-grace-secs, \
             60 s by default); waiting for that"
        );
        copies_made_elsewhere(client, id).await?;
    }
    let leaving = |m: &ClusterMap| m.node(id).is_none_or(|n| n.state == NodeState::Leaving);
    crate::map_change::commit(
        client,
        |m| Ok(if leaving(m) { None } else { m.mark_leaving(id) }),
        leaving,
    )
    .await
    .context("marking the server leaving")
}

/// Copies of partitions server `id` is listed in.
fn copies_on(map: &ClusterMap, id: NodeId) -> usize {
    map.partitions
        .iter()
        .filter(|p| p.replicas.contains(&id))
        .count()
}

/// How long `copies_made_elsewhere` waits for a change: the servers' grace period first.
const GRACE_WAIT_LIMIT: Duration = Duration::from_secs(600);

/// Waits until server `id`, down, holds no copy (made again on the others after the
/// servers' grace period), or is up again or out of the map.
async fn copies_made_elsewhere(client: &Client, id: NodeId) -> anyhow::Result<()> {
    let done = |m: &ClusterMap| {
        m.node(id).is_none_or(|n| n.state != NodeState::Down) || copies_on(m, id) == 0
    };
    until_map(client, GRACE_WAIT_LIMIT, done, |m| {
        format!("server {id} still holds {} copies", copies_on(m, id))
    })
    .await
    .map(|_| ())
}

/// Polls the newest map until `done` holds; an error saying `what` is left once the map
/// has not changed for `limit` (the cluster goes on).
async fn until_map(
    client: &Client,
    limit: Duration,
    done: impl Fn(&ClusterMap) -> bool,
    what: impl Fn(&ClusterMap) -> String,
) -> anyhow::Result<ClusterMap> {
    let (mut epoch, mut changed) = (0, std::time::Instant::now());
    loop {
        let map = client.newest_map().await;
        if done(&map) {
            return Ok(map);
        }
        if map.epoch != epoch {
            (epoch, changed) = (map.epoch, std::time::Instant::now());
        } else if changed.elapsed() > limit {
            bail!(
                "{} after {} s without a map change (epoch {}); the cluster keeps trying, see \
                 `myriad node list`",
                what(&map),
                limit.as_secs(),
                map.epoch
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until server `id` is out of the map (its copies all moved or made again).
pub async fn wait_gone(client: &Client, id: NodeId) -> anyhow::Result<ClusterMap> {
    until_map(
        client,
        STALL_LIMIT,
        |m| m.node(id).is_none(),
        |m| format!("server {id} still holds {} copies", copies_on(m, id)),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_names_every_server_with_its_copies() {
        let addrs: Vec<String> = (1..=3).map(|i| format!("10.0.0.{i}:7401")).collect();
        let map = ClusterMap::build(7, &addrs, 8, 3);
        let speaks = BTreeMap::from([(NodeId(1), 36), (NodeId(2), 35)]);
        let text = list(&map, &speaks);
        assert!(text.starts_with("cluster map epoch 7, 3 servers, 24 partitions, 3 copies"));
        for a in &addrs {
            let line = text
                .lines()
                .find(|l| l.contains(a.as_str()))
                .unwrap_or_else(|| panic!("{a} not listed: {text}"));
            assert!(line.contains(" up "), "{line}");
            assert!(
                line.contains("24"),
                "every server holds every partition: {line}"
            );
            let protocol = line.split_whitespace().last().unwrap_or_default();
            let want = match a.as_str() {
                "10.0.0.1:7401" => "36",
                "10.0.0.2:7401" => "35",
                _ => "-",
            };
            assert_eq!(protocol, want, "{line}");
        }
    }
}
