//! `myriad policy set|get|list|clear`: trees pinned to a zone (docs/zones.md). A policy is
//! part of the cluster map, committed through the cluster-map Raft group like every map
//! change; clients place the tree by it from the map, with no lookup.

use anyhow::{Context, bail};
use clap::Subcommand;
use myriad_client::{Client, ClusterMap, FsError};

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Pin PATH to ZONE: its directories, files and data live only on that zone's servers,
    /// on a partition group of their own with --replicas copies. PATH must not exist yet
    /// (moving an existing tree between zones online is not built yet): set the policy,
    /// then create the tree. Needs the cluster secret.
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
    },
    /// The policy PATH is placed by (the longest pinned root above it), or none.
    Get { path: String },
    /// Every policy, with its partitions and where their copies are.
    List,
    /// Remove the policy on PATH (which must not exist any more: its tree would be
    /// stranded on the group that goes away). Needs the cluster secret.
    Clear { path: String },
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
        } => {
            let path = root_path(&path)?;
            must_not_exist(client, &path, "pinning").await?;
            let map = change(client, |m| {
                let copies = replicas.unwrap_or(m.replication);
                m.with_policy(&path, &zone, copies, partitions_per_node)
                    .map(Some)
                    .map_err(anyhow::Error::from)
            })
            .await?;
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
            if map.policies.is_empty() {
                println!("no policies (every tree is placed over every zone)");
            }
            for p in &map.policies {
                println!("{}", describe(&map, &p.path));
            }
            Ok(())
        }
        PolicyCmd::Clear { path } => {
            let path = root_path(&path)?;
            must_not_exist(client, &path, "clearing the policy of").await?;
            change(client, |m| {
                m.without_policy(&path)
                    .map(Some)
                    .with_context(|| format!("{path} has no policy"))
            })
            .await?;
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

async fn must_not_exist(client: &Client, path: &str, what: &str) -> anyhow::Result<()> {
    match client.stat(path).await {
        Err(FsError::NotFound) => Ok(()),
        Ok(_) => bail!(
            "{path} exists: {what} an existing tree would need it moved between zones online, which is not built yet; remove it (or use a new path) first"
        ),
        Err(e) => Err(e).with_context(|| format!("cannot tell whether {path} exists")),
    }
}

/// Commits a change of the policies (map_change.rs): landed once the newest map's
/// policies are the ones it made.
pub(crate) async fn change(
    client: &Client,
    edit: impl Fn(&ClusterMap) -> anyhow::Result<Option<ClusterMap>>,
) -> anyhow::Result<ClusterMap> {
    let wanted = std::sync::Mutex::new(None);
    crate::map_change::commit(
        client,
        |m| {
            let next = edit(m)?;
            if let Ok(mut w) = wanted.lock() {
                *w = next.as_ref().map(|n| n.policies.clone());
            }
            Ok(next)
        },
        |now| {
            wanted
                .lock()
                .is_ok_and(|w| w.as_ref().is_none_or(|p| *p == now.policies))
        },
    )
    .await
}

/// "/lab: zone a, 2 copies, 12 partitions on servers 1,3,5".
fn describe(map: &ClusterMap, path: &str) -> String {
    let Some(p) = map.policies.iter().find(|p| p.path == path) else {
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
    format!(
        "{path}: zone {}, {} copies, {} partitions (group {}) on servers {}",
        p.zone,
        p.replicas,
        parts.len(),
        p.group,
        servers.join(",")
    )
}
