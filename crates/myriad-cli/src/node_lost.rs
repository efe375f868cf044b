//! `myriad node lost ID... [--accept-loss]`: the administrator's last resort when every
//! in-sync copy of some partition is gone for good (docs/replication.md "Servers lost for
//! good"). The plan is `ClusterMap::declare_lost`; this prints it, and commits it only when
//! the loss is accepted.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::Context;
use myriad_client::{Client, ClusterMap, LossPlan, NodeId};

pub async fn run(client: &Client, lost: &BTreeSet<NodeId>, accept: bool) -> anyhow::Result<()> {
    let map = client.newest_map().await;
    let plan = map.declare_lost(lost)?;
    print!("{}", describe(lost, &plan));
    if plan.forced.is_empty() {
        return Ok(());
    }
    if !accept {
        println!("nothing changed: run again with --accept-loss to serve them again, losing that");
        return Ok(());
    }
    let forced = |m: &ClusterMap| m.declare_lost(lost).map(|p| p.forced.is_empty());
    let landed = crate::map_change::commit(
        client,
        |m| Ok(m.declare_lost(lost)?.next),
        |m| forced(m).unwrap_or(true),
    )
    .await
    .context("declaring the servers lost")?;
    println!(
        "done (map epoch {}): the partitions above are served again. Run `myriad fsck` to find \
         names whose files were lost, and `myriad node remove ID` for each lost server to \
         make its copies again elsewhere now.",
        landed.epoch
    );
    Ok(())
}

/// What the plan does, one line per partition, in words an operator can act on.
fn describe(lost: &BTreeSet<NodeId>, plan: &LossPlan) -> String {
    let names = |ids: &[NodeId]| {
        ids.iter()
            .map(|i| i.0.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let all: Vec<NodeId> = lost.iter().copied().collect();
    let mut out = String::new();
    for f in &plan.forced {
        let _ = writeln!(
            out,
            "partition {}: its in-sync copies were on lost server(s) {}; served again from \
             server {}'s copy, which was behind: every change acknowledged after that copy \
             fell behind is LOST",
            f.partition,
            names(&f.lost),
            f.primary.0
        );
    }
    for (pid, others) in &plan.no_copy_up {
        let _ = writeln!(
            out,
            "partition {pid}: its in-sync copies were on lost server(s); no other copy is up \
             (on server(s) {}): start one of them, then declare again",
            names(others)
        );
    }
    for (pid, kept) in &plan.waiting {
        let _ = writeln!(
            out,
            "partition {pid}: waits for its in-sync copy on server(s) {} (down, not declared \
             lost): it serves again, losing nothing, once one returns",
            names(kept)
        );
    }
    if plan.forced.is_empty() && plan.no_copy_up.is_empty() {
        let _ = writeln!(
            out,
            "no partition has its only in-sync copies on server(s) {}: nothing to accept; \
             `myriad node remove ID` makes a lost server's copies again elsewhere",
            names(&all)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_names_each_partition_its_new_copy_and_the_loss() {
        let addrs: Vec<String> = (1..=3).map(|i| format!("127.0.0.1:{i}")).collect();
        let mut m = ClusterMap::build(1, &addrs, 1, 3);
        let pid = m.partitions[0].id;
        let primary = m.primary_of(pid).unwrap_or(NodeId(1));
        let others: Vec<NodeId> = m.partitions[0].replicas[1..].to_vec();
        for &o in &others {
            m = m.mark_down(o).unwrap_or_else(|| panic!("down"));
        }
        m = m.mark_down(primary).unwrap_or_else(|| panic!("down"));
        let lost = BTreeSet::from([primary]);
        let plan = m.declare_lost(&lost).unwrap_or_else(|e| panic!("{e}"));
        let text = describe(&lost, &plan);
        assert!(text.contains("no other copy is up"), "{text}");
        for &o in &others {
            m = m.mark_up(o).unwrap_or_else(|| panic!("up"));
        }
        let plan = m.declare_lost(&lost).unwrap_or_else(|e| panic!("{e}"));
        let text = describe(&lost, &plan);
        assert!(
            text.contains(&format!(
                "partition {pid}: its in-sync copies were on lost server(s) {}",
                primary.0
            )) && text.contains("LOST"),
            "{text}"
        );
        let nothing = describe(&BTreeSet::from([others[0]]), &LossPlan::default());
        assert!(nothing.contains("nothing to accept"), "{nothing}");
    }
}
