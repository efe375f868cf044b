//! `myriad policy set|get|list|clear`: trees pinned to a zone (docs/zones.md). A policy is
//! part of the cluster map, committed through the cluster-map Raft group like every map
//! change; clients place the tree by it from the map, with no lookup.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Subcommand;
use myriad_client::{Client, ClusterMap, FsError, PolicyState};

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Pin PATH to ZONE: its directories, files and data live only on that zone's servers,
    /// on a partition group of their own with --replicas copies. If PATH exists, its tree
    /// moves there online (reads go on; writes into it wait until the move is done) and
    /// this waits for the move. Needs the cluster secret.
    Set {
        path: String,
        #[arg(long, value_parser = crate::server_cmd::parse_zone)]
        zone: String,
        /// Copies of everything in the tree (capped by the zone's servers). Default: the
        /// cluster's.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=5))]
        replicas: Option<u32>,
        /// Partitions of the tree's group per server of the zone.
        #[arg(long, default_value_t = myriad_client::DEFAULT_PARTITIONS_PER_NODE, value_parser = clap::value_parser!(u32).range(1..=64))]
        partitions_per_node: u32,
        /// How long to wait for an existing tree's move (seconds); it goes on without us.
        #[arg(long, default_value_t = 3600)]
        wait_s: u64,
    },
    /// The policy PATH is placed by (the longest pinned root above it), or none.
    Get { path: String },
    /// Every policy, with its partitions and where their copies are.
    List,
    /// Remove the policy on PATH. If PATH exists, its tree moves online back to where the
    /// policies above it (or none) place it, and this waits for the move. Files that left
    /// the tree keep their data on the policy's partitions, which stay. Needs the cluster
    /// secret.
    Clear {
        path: String,
        /// How long to wait for an existing tree's move (seconds); it goes on without us.
        #[arg(long, default_value_t = 3600)]
        wait_s: u64,
    },
}

impl PolicyCmd {
    /// True for the commands that change the cluster map (they need the cluster secret).
    #[must_use]
    pub fn changes_the_map(&self) -> bool {
        matches!(self, PolicyCmd::Set { .. } | PolicyCmd::Clear { .. })
    }
}

pub async fn run(cmd: PolicyCmd, client: &Client) -> anyhow::Result<()> {
    match cmd {
        PolicyCmd::Set {
            path,
            zone,
            replicas,
            partitions_per_node,
            wait_s,
        } => {
            let path = root_path(&path)?;
            let existing = exists(client, &path).await?;
            let map = change(client, |m| {
                let copies = replicas.unwrap_or(m.replication);
                let next = if existing {
                    m.with_policy_arriving(&path, &zone, copies, partitions_per_node)
                } else {
                    m.with_policy(&path, &zone, copies, partitions_per_node)
                };
                next.map(Some).map_err(anyhow::Error::from)
            })
            .await?;
            let map = if existing {
                println!("{path} exists: moving its tree to zone {zone}");
                wait_for_move(client, &path, map, wait_s).await?
            } else {
                map
            };
            println!("{}", describe(&map, &path));
            Ok(())
        }
        PolicyCmd::Get { path } => {
            let path = crate::fs_cmds::normalize(&path)?;
            let map = client.newest_map().await;
            match map.policy_for(&path) {
                Some(p) => println!("{}", describe(&map, &p.path)),
                None => println!("{path}: no policy (placed over every zone)"),
            }
            Ok(())
        }
        PolicyCmd::List => {
            let map = client.newest_map().await;
            let live: Vec<_> = map
                .policies
                .iter()
                .filter(|p| p.state != PolicyState::Retired)
                .collect();
            if live.is_empty() {
                println!("no policies (every tree is placed over every zone)");
            }
            for p in &live {
                println!("{}", describe(&map, &p.path));
            }
            let retired = map.policies.len() - live.len();
            if retired > 0 {
                println!(
                    "({retired} cleared policies keep their partitions: files that left their trees keep data there)"
                );
            }
            Ok(())
        }
        PolicyCmd::Clear { path, wait_s } => {
            let path = root_path(&path)?;
            let existing = exists(client, &path).await?;
            let map = change(client, |m| {
                if existing {
                    return m
                        .with_policy_leaving(&path)
                        .map(Some)
                        .map_err(anyhow::Error::from);
                }
                if let Some(p) = m.moving_policy() {
                    bail!(
                        "the tree {} is moving between zones; wait until its move is done",
                        p.path
                    );
                }
                m.without_policy(&path)
                    .map(Some)
                    .with_context(|| format!("{path} has no policy"))
            })
            .await?;
            if existing {
                println!("{path} exists: moving its tree out of its zone");
                wait_for_move(client, &path, map, wait_s).await?;
            }
            println!("{path}: policy cleared");
            Ok(())
        }
    }
}

/// A policy root: a normalized path below `/`.
fn root_path(path: &str) -> anyhow::Result<String> {
    let path = crate::fs_cmds::normalize(path)?;
    if path == "/" {
        bail!("the root cannot be pinned (zones place it with every other unpinned tree)");
    }
    Ok(path)
}

async fn exists(client: &Client, path: &str) -> anyhow::Result<bool> {
    match client.stat(path).await {
        Err(FsError::NotFound) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => Err(e).with_context(|| format!("cannot tell whether {path} exists")),
    }
}

/// Waits until the move of the tree at `path` that `started` began is settled (the servers
/// holding its root's entry drive it: docs/zones.md section 3), or abandoned.
async fn wait_for_move(
    client: &Client,
    path: &str,
    started: ClusterMap,
    wait_s: u64,
) -> anyhow::Result<ClusterMap> {
    let (group, arriving) = started
        .live_policy(path)
        .map(|p| (p.group, p.state == PolicyState::Arriving))
        .context("the policy's move did not land in the map")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_s);
    loop {
        let map = client.newest_map().await;
        let state = map
            .policies
            .iter()
            .find(|p| p.group == group)
            .map(|p| p.state);
        match state {
            Some(PolicyState::Arriving | PolicyState::Leaving) => {}
            Some(PolicyState::Active) if arriving => return Ok(map),
            Some(PolicyState::Retired) if !arriving => return Ok(map),
            _ => {
                bail!("the move of {path} was abandoned (the servers' logs say why); nothing moved")
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{path} is still moving after {wait_s} s; `myriad policy get {path}` shows when it is done"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Commits a change of the policies (map_change.rs): landed once the newest map's
/// policies are the ones it made.
pub(crate) async fn change(
    client: &Client,
    edit: impl Fn(&ClusterMap) -> anyhow::Result<Option<ClusterMap>>,
) -> anyhow::Result<ClusterMap> {
    crate::map_change::commit_part(client, edit, |m| m.policies.clone()).await
}

/// "/lab: zone a, 2 copies, 12 partitions on servers 1,3,5".
fn describe(map: &ClusterMap, path: &str) -> String {
    let Some(p) = map.live_policy(path) else {
        return format!("{path}: no policy");
    };
    let parts: Vec<&myriad_client::PartitionInfo> = map
        .partitions
        .iter()
        .filter(|q| q.group == p.group)
        .collect();
    let mut servers: Vec<u32> = parts
        .iter()
        .flat_map(|q| q.replicas.iter().map(|r| r.0))
        .collect();
    servers.sort_unstable();
    servers.dedup();
    let servers: Vec<String> = servers.iter().map(u32::to_string).collect();
    let moving = match p.state {
        PolicyState::Arriving => " (its tree is moving in)",
        PolicyState::Leaving => " (its tree is moving out)",
        _ => "",
    };
    format!(
        "{path}: zone {}, {} copies, {} partitions (group {}) on servers {}{moving}",
        p.zone,
        p.replicas,
        parts.len(),
        p.group,
        servers.join(",")
    )
}
