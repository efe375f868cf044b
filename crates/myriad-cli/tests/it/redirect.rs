//! Clients and servers follow the cluster map by epoch: a client with an old map is
//! redirected and adopts the newer one; a server with an old map is sent the newer one.

use myriad_client::ClusterMap;

use crate::harness::TestCluster;

/// A newer map with different weights where "/" keeps its owner (so the root stays put; data
/// movement on map changes is issue 6), plus a directory name whose owner differs between maps.
fn newer_map(old: &ClusterMap, epoch: u64) -> (ClusterMap, String) {
    let old_ring = old.ring();
    for heavy in 0..old.nodes.len() {
        let mut m = old.clone();
        m.epoch = epoch;
        m.nodes[heavy].weight = 3;
        let ring = m.ring();
        if ring.owner_of_dir("/") != old_ring.owner_of_dir("/") {
            continue;
        }
        if let Some(name) = (0..5000)
            .map(|i| format!("/moved{i}"))
            .find(|p| ring.owner_of_dir(p) != old_ring.owner_of_dir(p))
        {
            return (m, name);
        }
    }
    panic!("no suitable map");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_client_is_redirected_and_stale_server_is_updated() {
    let tc = TestCluster::start(4);
    let old_client = tc.client();
    let (m2, dir) = newer_map(&tc.map, 2);

    // An admin client installs epoch 2 on every server.
    let admin = tc.client_with(m2.clone(), std::time::Duration::from_secs(10));
    admin
        .install_map(m2.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    admin
        .mkdir(&dir, 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The old client routes /dir/f to the wrong node, gets a redirect with epoch 2, retries.
    c_create(&old_client, &format!("{dir}/f")).await;
    assert_eq!(old_client.map().epoch, 2, "client adopted the newer map");
    assert_eq!(
        old_client
            .fetch(&format!("{dir}/f"))
            .await
            .map(|x| x.1)
            .ok()
            .as_deref(),
        Some(&b"data"[..])
    );
    let counts = old_client.all_counters().await;
    assert!(
        counts
            .iter()
            .all(|(_, r)| r.as_ref().map(|c| c.epoch == 2).unwrap_or(false))
    );

    // The map file was rewritten by the servers, so restarts keep the newer map.
    let on_disk =
        ClusterMap::from_json(&std::fs::read_to_string(tc.map_file()).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(on_disk.epoch, 2);

    // A client that is ahead (epoch 3) pushes its map to the servers it talks to.
    let (mut m3, _) = newer_map(&m2, 3);
    m3.nodes = m2.nodes.clone();
    let ahead = tc.client_with(m3, std::time::Duration::from_secs(10));
    assert!(ahead.stat(&format!("{dir}/f")).await.is_ok());
    let owner = ahead.owner_of_entry(&format!("{dir}/f"));
    assert_eq!(ahead.counters(owner).await.map(|c| c.epoch).ok(), Some(3));
}

async fn c_create(c: &myriad_client::Client, path: &str) {
    c.create(path, 0o644, true, b"data")
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}
