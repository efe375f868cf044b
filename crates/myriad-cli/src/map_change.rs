//! An administrator's change of the cluster map (a policy, a server added or leaving),
//! made on the newest map and committed through the cluster-map Raft group; made again
//! when another change (the leader's moves, say) was committed at its epoch first.

use std::time::Duration;

use anyhow::{Context, bail};
use myriad_client::{Client, ClusterMap, Installed};

/// How many times a change that lost a race is made again.
const CHANGE_TRIES: usize = 10;

/// Applies `edit` to the newest map and commits the result, again if it lost a race,
/// until `landed(newest map)` says it is in. `edit` returning `None`: nothing to change.
/// Returns the map it landed in.
pub async fn commit(
    client: &Client,
    edit: impl Fn(&ClusterMap) -> anyhow::Result<Option<ClusterMap>>,
    landed: impl Fn(&ClusterMap) -> bool,
) -> anyhow::Result<ClusterMap> {
    for _ in 0..CHANGE_TRIES {
        let map = client.newest_map().await;
        let Some(next) = edit(&map)? else {
            return Ok(map);
        };
        match client
            .install_map(next)
            .await
            .context("committing the new cluster map")?
        {
            // Another change got in first: again, on the newest map.
            Installed::LostRace => {}
            Installed::Yes => {}
        }
        let now = client.newest_map().await;
        if landed(&now) {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "the cluster map kept changing under this change ({CHANGE_TRIES} tries); is the cluster secret the one the servers have?"
    )
}

/// `commit` of a change to one part of the map (`part`: the policies, the quota on a
/// path): landed once the newest map's part is the one the change made.
pub async fn commit_part<T: PartialEq>(
    client: &Client,
    edit: impl Fn(&ClusterMap) -> anyhow::Result<Option<ClusterMap>>,
    part: impl Fn(&ClusterMap) -> T,
) -> anyhow::Result<ClusterMap> {
    let wanted = std::sync::Mutex::new(None);
    commit(
        client,
        |m| {
            let next = edit(m)?;
            if let Ok(mut w) = wanted.lock() {
                *w = next.as_ref().map(&part);
            }
            Ok(next)
        },
        |now| {
            wanted
                .lock()
                .is_ok_and(|w| w.as_ref().is_none_or(|p| *p == part(now)))
        },
    )
    .await
}
