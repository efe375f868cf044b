//! A server made part of a cluster from its own command line (issue 48, docs/deploy.md):
//! `--init` makes a new cluster of this one server; `--join SEED[,SEED...]` adds this server
//! to the cluster the seeds serve (the map change committed through the cluster-map Raft
//! group, as `cluster add-node` does; copies then move to it online). Either writes the
//! cluster map and this server's id into its data directory, so that a restart with the
//! same directory (and `--join` or nothing) runs as the same server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use myriad_client::{Caller, Client, ClusterMap, NodeId, NodeInfo, NodeState};
use myriad_client::{ClientConfig, FsError, Keyring};

/// The cluster map a data directory's server runs with (written back as it changes).
pub const MAP_FILE: &str = "cluster.json";
/// This server's id in the cluster, written when it joined or made the cluster.
pub const NODE_ID_FILE: &str = "node.id";
/// How long a joining server waits for each seed.
const SEED_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a joining server waits for its map change to be committed.
const JOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a joining server waits for the cluster to answer and accept it (every host
/// of a cluster booting at once: the seeds may come up, and elect a Raft leader, after).
const JOIN_WAIT: Duration = Duration::from_secs(300);

/// How to make a new cluster (`--init`).
#[derive(Clone, Copy, Debug)]
pub struct NewCluster {
    pub partitions: u32,
    pub replicas: u32,
}

/// What a server needs to start, once it is a member.
#[derive(Debug)]
pub struct Member {
    pub map_path: PathBuf,
    pub node_id: NodeId,
    pub secret_file: PathBuf,
}

/// The address others reach this server at: `--advertise`, else `--listen` unless that
/// is a wildcard address nobody can dial.
pub fn advertised(advertise: Option<&str>, listen: Option<&str>) -> anyhow::Result<String> {
    if let Some(a) = advertise {
        return Ok(a.to_string());
    }
    let Some(l) = listen else {
        bail!("pass --listen ADDR (and --advertise ADDR if others reach this server elsewhere)");
    };
    let wildcard = l
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_unspecified());
    if wildcard {
        bail!("--listen {l} is not an address others can reach: pass --advertise HOST:PORT too");
    }
    Ok(l.to_string())
}

fn read_node_id(dir: &Path) -> anyhow::Result<Option<NodeId>> {
    let p = dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&p) {
        Ok(t) => Ok(Some(NodeId(t.trim().parse().with_context(|| {
            format!("{} does not hold a server id", p.display())
        })?))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
    }
}

/// Writes `text` to `path` through a temporary file and a rename, synced: a crash leaves
/// the old file or the new one.
fn write_synced(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn cluster_secret(file: &Path) -> anyhow::Result<Keyring> {
    let keys = crate::keys::load(file)?;
    if !keys.has_cluster_secret() {
        bail!(
            "{} holds no cluster secret (a client key cannot run a server)",
            file.display()
        );
    }
    Ok(keys)
}

/// The server this data directory already belongs to, if it joined or made a cluster.
pub fn existing_member(dir: &Path, secret_file: Option<PathBuf>) -> anyhow::Result<Option<Member>> {
    existing(dir, secret_file)
}

/// The server this data directory already belongs to, if it does.
fn existing(dir: &Path, secret_file: Option<PathBuf>) -> anyhow::Result<Option<Member>> {
    let Some(node_id) = read_node_id(dir)? else {
        return Ok(None);
    };
    let map_path = dir.join(MAP_FILE);
    if !map_path.exists() {
        bail!(
            "{} names server {node_id} but {} is missing",
            dir.join(NODE_ID_FILE).display(),
            map_path.display()
        );
    }
    let secret_file = secret_file.unwrap_or_else(|| dir.join(crate::keys::SECRET_FILE));
    Ok(Some(Member {
        map_path,
        node_id,
        secret_file,
    }))
}

/// `--init`: a new cluster of this one server, in `dir` (or, if `dir` holds this server
/// already, that server as it was). Its keys: `secret_file` if given, else new ones written into `dir`.
pub fn init(
    dir: &Path,
    addr: &str,
    zone: Option<String>,
    secret_file: Option<PathBuf>,
    new: NewCluster,
) -> anyhow::Result<Member> {
    if let Some(m) = existing(dir, secret_file.clone())? {
        // Started again with the same flags (a service unit keeps --init): this server, as
        // it was. Another address means another server's data: refused, nothing is made.
        let map = myriad_client::setup::load_map(&m.map_path)?;
        let known = map
            .nodes
            .iter()
            .find(|n| n.id == m.node_id)
            .map(|n| &n.addr);
        if known.is_some_and(|a| a != addr) {
            bail!(
                "{} holds server {} of a cluster, at {}, not {addr}: start it with its own \
                 address (or give another --data-dir to make a new cluster)",
                dir.display(),
                m.node_id,
                known.map_or("", |a| a.as_str())
            );
        }
        return Ok(m);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let keyfiles = [crate::keys::SECRET_FILE, crate::keys::CLIENT_KEY_FILE];
    let other = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .find(|e| !keyfiles.contains(&e.file_name().to_string_lossy().as_ref()));
    if let Some(e) = other {
        bail!(
            "{} is not empty ({} is there): --init makes a new cluster in an empty data \
             directory",
            dir.display(),
            e.file_name().to_string_lossy()
        );
    }
    let secret_file = match secret_file {
        Some(f) => {
            cluster_secret(&f)?;
            f
        }
        None => {
            let s = dir.join(crate::keys::SECRET_FILE);
            if !s.exists() {
                crate::keys::init(&s, &dir.join(crate::keys::CLIENT_KEY_FILE))?;
            }
            s
        }
    };
    let zones: Vec<String> = zone.into_iter().collect();
    let map = ClusterMap::build_in_zones(
        1,
        &[addr.to_string()],
        &zones,
        new.partitions.max(1),
        new.replicas.max(1),
    );
    map.validate()?;
    let map_path = dir.join(MAP_FILE);
    write_synced(&map_path, &map.to_json())?;
    write_synced(&dir.join(NODE_ID_FILE), "1\n")?;
    Ok(Member {
        map_path,
        node_id: NodeId(1),
        secret_file,
    })
}

/// `--join SEEDS`: this server added to the cluster the seeds serve (or, if `dir` holds a
/// member already, that member, as it was).
pub async fn join(
    dir: &Path,
    addr: &str,
    zone: Option<String>,
    seeds: &[String],
    secret_file: Option<PathBuf>,
) -> anyhow::Result<Member> {
    if let Some(m) = existing(dir, secret_file.clone())? {
        return Ok(m);
    }
    let Some(secret_file) = secret_file else {
        bail!("--join needs --secret-file: the cluster secret (a server serves with it)");
    };
    let keys = cluster_secret(&secret_file)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let map =
        myriad_client::setup::map_from_seeds_waiting(seeds, keys.clone(), SEED_TIMEOUT, JOIN_WAIT)
            .await?;
    if let Some(n) = map.nodes.iter().find(|n| n.addr == addr) {
        bail!(
            "{addr} is server {}'s address in the cluster map: a new server needs another \
             address (or remove server {} first: `myriad node remove {}`)",
            n.id,
            n.id,
            n.id
        );
    }
    let zone = match zone {
        Some(z) => z,
        None if map.zones().len() == 1 => map.zone_of(map.nodes[0].id).to_string(),
        None => bail!(
            "the cluster's servers are in zones {}: name this server's with --zone",
            map.zones().into_iter().collect::<Vec<_>>().join(",")
        ),
    };
    let mut cfg = ClientConfig::new(map, Caller::root(), keys);
    cfg.request_timeout = JOIN_TIMEOUT;
    let client = Client::new(cfg).map_err(|e| anyhow::anyhow!("bad cluster map: {e}"))?;
    // While the cluster cannot change its map yet (its first server still electing itself,
    // a majority restarting), the change is asked for again.
    let landed = myriad_client::setup::keep_trying(
        JOIN_WAIT,
        || add_to_map(&client, addr, &zone),
        transient,
        "cannot join yet, trying again",
    )
    .await
    .context("adding this server to the cluster map")?;
    let Some(node_id) = id_at(&landed, addr) else {
        bail!("the cluster map does not list {addr} after the change");
    };
    let map_path = dir.join(MAP_FILE);
    write_synced(&map_path, &landed.to_json())?;
    write_synced(&dir.join(NODE_ID_FILE), &format!("{node_id}\n"))?;
    tracing::info!(%node_id, addr, epoch = landed.epoch, "joined the cluster");
    Ok(Member {
        map_path,
        node_id,
        secret_file,
    })
}

/// Whether `e` came from an error the same request may not meet later.
fn transient(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<FsError>()
            .is_some_and(FsError::is_transient)
    })
}

/// The id of the server at `addr` in `map`, if it is there.
fn id_at(map: &ClusterMap, addr: &str) -> Option<NodeId> {
    map.nodes.iter().find(|n| n.addr == addr).map(|n| n.id)
}

/// Adds a server at `addr` in `zone` to the cluster map (nothing if it is there already).
async fn add_to_map(client: &Client, addr: &str, zone: &str) -> anyhow::Result<ClusterMap> {
    let mine = |m: &ClusterMap| id_at(m, addr);
    crate::map_change::commit(
        client,
        |m| {
            if mine(m).is_some() {
                return Ok(None);
            }
            let id = m.nodes.iter().map(|n| n.id.0).max().unwrap_or(0) + 1;
            let mut next = m.clone();
            next.epoch += 1;
            next.nodes.push(NodeInfo {
                id: NodeId(id),
                addr: addr.to_string(),
                weight: 1,
                state: NodeState::Up,
                zone: zone.to_string(),
            });
            next.validate()?;
            Ok(Some(next))
        },
        |now| mine(now).is_some(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_listen_address_needs_an_advertised_one() {
        assert_eq!(
            advertised(None, Some("10.1.0.2:7401")).ok().as_deref(),
            Some("10.1.0.2:7401")
        );
        assert!(advertised(None, Some("0.0.0.0:7401")).is_err());
        assert!(advertised(None, Some("[::]:7401")).is_err());
        assert_eq!(
            advertised(Some("h1:7401"), Some("0.0.0.0:7401"))
                .ok()
                .as_deref(),
            Some("h1:7401")
        );
        assert!(advertised(None, None).is_err());
    }

    #[test]
    fn init_makes_one_server_and_starts_it_as_it_was_the_second_time() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = d.path().join("srv");
        let new = NewCluster {
            partitions: 16,
            replicas: 3,
        };
        let m = init(&dir, "10.1.0.2:7401", None, None, new).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.node_id, NodeId(1));
        let map = myriad_client::setup::load_map(&m.map_path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(map.nodes.len(), 1);
        assert_eq!(map.partitions.len(), 16);
        assert_eq!(map.replication, 3);
        assert!(dir.join(crate::keys::CLIENT_KEY_FILE).exists());
        // Started again with --init: the same server, the same map (no new cluster).
        let before = std::fs::read(&m.map_path).unwrap_or_else(|e| panic!("{e}"));
        let again = init(&dir, "10.1.0.2:7401", None, None, new).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.node_id, NodeId(1));
        assert_eq!(std::fs::read(&again.map_path).ok(), Some(before));
        // ...but not as a server at another address.
        let moved = init(&dir, "10.1.0.9:7401", None, None, new);
        assert!(
            moved
                .as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains("holds server 1")),
            "{moved:?}"
        );
        // A directory holding anything else is not made a new cluster either.
        let other = d.path().join("other");
        std::fs::create_dir(&other).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(other.join("store"), b"x").unwrap_or_else(|e| panic!("{e}"));
        assert!(init(&other, "10.1.0.3:7401", None, None, new).is_err());
    }
}
