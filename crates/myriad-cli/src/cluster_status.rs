//! `myriad cluster status`: what the cluster map says (partitions, copies moving or behind,
//! zones) and what each server reports (state, lease, leader, requests, fsyncs, disk).

use std::path::{Path, PathBuf};
use std::time::Duration;

use myriad_client::ClusterMap;

/// " zone NAME" after a server's address, nothing for the unnamed zone.
pub(crate) fn zone_label(zone: &str) -> String {
    if zone.is_empty() {
        String::new()
    } else {
        format!(" zone {zone}")
    }
}

/// "zones: a (3 servers, 48 copies), b (...)" and whether every partition covers as many
/// zones as it can; `None` for a cluster in one zone.
fn zones_line(map: &ClusterMap) -> Option<String> {
    let zones = map.zones();
    if zones.len() < 2 && zones.first().is_none_or(|z| z.is_empty()) {
        return None;
    }
    let per_zone: Vec<String> = zones
        .iter()
        .map(|z| {
            let servers = map.nodes.iter().filter(|n| n.zone == *z).count();
            let copies = map
                .partitions
                .iter()
                .flat_map(|p| &p.replicas)
                .filter(|r| map.zone_of(**r) == *z)
                .count();
            format!("{z} ({servers} servers, {copies} copies)")
        })
        .collect();
    let short = map
        .partitions
        .iter()
        .filter(|p| map.zone_count(&p.replicas) < map.zones_wanted(p))
        .count();
    let spread = if short == 0 {
        "every partition spans as many zones as it can".to_string()
    } else {
        format!("{short} partitions span fewer zones than they could (moving)")
    };
    Some(format!("zones: {}; {spread}", per_zone.join(", ")))
}

/// "from zone b: file 120 req 1.2 MiB, membership 30 req 4.0 KiB" per zone that sent this
/// server requests (bytes both ways), when any came from a zone but the server's own.
fn zone_traffic_lines(c: &myriad_client::proto::CounterSnapshot) -> Vec<String> {
    if c.zone_traffic.iter().all(|t| t.zone == c.zone) {
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    let mut zone: Option<&str> = None;
    for t in &c.zone_traffic {
        let part = format!(
            "{} {} req {}",
            t.kind.name(),
            t.requests,
            crate::fs_cmds::human(t.bytes())
        );
        if zone == Some(t.zone.as_str())
            && let Some(last) = out.last_mut()
        {
            last.push_str(", ");
            last.push_str(&part);
        } else {
            let whose = if t.zone == c.zone { " (own)" } else { "" };
            let name = if t.zone.is_empty() { "\"\"" } else { &t.zone };
            out.push(format!("from zone {name}{whose}: {part}"));
            zone = Some(t.zone.as_str());
        }
    }
    out
}

/// One line about the moves in progress.
pub(crate) fn moves_line(map: &ClusterMap) -> String {
    let moves = map.moves();
    let behind: Vec<String> = map
        .partitions
        .iter()
        .flat_map(|p| p.behind.iter().map(move |b| format!("{}@{b}", p.id)))
        .collect();
    // Copies that missed writes while down, until the leader sees them caught up; and
    // partitions whose only live copies are behind, which wait for an in-sync one.
    let mut tail = String::new();
    if !behind.is_empty() {
        tail = format!(
            "; {} copies catching up (partition@server: {})",
            behind.len(),
            behind.join(" ")
        );
    }
    let waiting = map
        .partitions
        .iter()
        .filter(|p| map.primary_of(p.id).is_none())
        .count();
    if waiting > 0 {
        tail.push_str(&format!(
            "; {waiting} partitions have no copy up and in sync (waiting for one to return; \
             if those servers are lost for good: `myriad node lost ID`)"
        ));
    }
    if moves.is_empty() {
        return format!("no copies moving{tail}");
    }
    let list: Vec<String> = moves
        .iter()
        .map(|(p, m)| {
            if m.adds() {
                format!("partition {p}: a copy added on server {}", m.to)
            } else {
                format!("partition {p}: server {} -> {}", m.from, m.to)
            }
        })
        .collect();
    format!("{} copies moving ({}){tail}", moves.len(), list.join(", "))
}

/// `myriad cluster status`: the map, and each server's state, counters, zones, metrics
/// address and disk.
pub async fn status(
    cluster: Option<PathBuf>,
    secret_file: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<()> {
    // A local cluster's servers write their metrics address beside their data.
    let local_dir = cluster
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf);
    let client = crate::fs_cmds::connect(cluster, secret_file, timeout)?;
    // The newest map any server has (the map file may be behind a failover).
    let map = client.newest_map().await;
    println!(
        "cluster map epoch {}, {} nodes, chunk {} KiB, inline max {} KiB",
        map.epoch,
        map.nodes.len(),
        map.chunk_size_bytes / 1024,
        map.inline_max_bytes / 1024
    );
    println!(
        "{} partitions, {} copies each; {}",
        map.partitions.len(),
        map.replication,
        moves_line(&map)
    );
    if let Some(line) = zones_line(&map) {
        println!("{line}");
    }
    for (id, r) in client.all_counters().await {
        let addr = map.node(id).map(|n| n.addr.clone()).unwrap_or_default();
        match r {
            Ok(c) => {
                let ops: Vec<String> = c
                    .client_requests
                    .iter()
                    .map(|o| format!("{}={}", o.op, o.count))
                    .collect();
                let s2s: Vec<String> = c
                    .server_requests
                    .iter()
                    .map(|o| format!("{}={}", o.op, o.count))
                    .collect();
                let state = match (map.node(id).map(|n| n.state), c.serving) {
                    (Some(myriad_client::NodeState::Leaving), _) => "leaving",
                    (Some(myriad_client::NodeState::Down), _) => "marked down",
                    (_, true) => "up, serving",
                    (_, false) => "up, no lease",
                };
                println!(
                    "node {id} {addr}{} {state}  epoch {}  leader {}  partitions: {} primary, {} backup  fsyncs {} ({} mutations)",
                    zone_label(map.zone_of(id)),
                    c.epoch,
                    c.raft_leader,
                    c.primaries,
                    c.backups,
                    c.syncs,
                    c.synced_mutations
                );
                println!(
                    "    client requests: {}",
                    if ops.is_empty() {
                        "-".into()
                    } else {
                        ops.join(" ")
                    }
                );
                println!(
                    "    server requests: {} (sent {})",
                    if s2s.is_empty() {
                        "-".into()
                    } else {
                        s2s.join(" ")
                    },
                    c.server_requests_sent
                );
                for line in zone_traffic_lines(&c) {
                    println!("    {line}");
                }
                if let Some(addr) = local_dir.as_ref().and_then(|d| {
                    std::fs::read_to_string(d.join(format!("node-{id}/metrics.addr"))).ok()
                }) {
                    println!("    metrics: http://{}/metrics", addr.trim());
                }
                if let Ok(s) = client.server_statfs(id).await {
                    println!(
                        "    disk: {} stored, {} free of {}",
                        crate::fs_cmds::human(s.used_bytes),
                        crate::fs_cmds::human(s.free_bytes),
                        crate::fs_cmds::human(s.total_bytes)
                    );
                    for t in &s.tiers {
                        println!("  {}", crate::fs_cmds::tier_line(t));
                    }
                }
            }
            Err(e) => println!("node {id} {addr} DOWN ({e})"),
        }
    }
    Ok(())
}
