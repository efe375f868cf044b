//! Clients and servers follow the cluster map by epoch: a client with an old map is
//! redirected and adopts the newer one; a server with an old map is sent the newer one.

use myriad_client::ClusterMap;

use crate::harness::TestCluster;

/// A newer map where two partitions (neither holding "/", so the root stays put) swap
/// servers, plus a directory name on one of them: its server differs between the maps.
fn newer_map(old: &ClusterMap, epoch: u64) -> (ClusterMap, String) {
    let ring = old.ring();
    let root = ring.owner_of_dir("/");
    let movable: Vec<usize> = (0..old.partitions.len())
        .filter(|&i| old.partitions[i].id != root)
        .collect();
    let (a, b) = (movable[0], movable[1]);
    let mut m = old.clone();
    m.epoch = epoch;
    let ra = m.partitions[a].replicas.clone();
    m.partitions[a].replicas = m.partitions[b].replicas.clone();
    m.partitions[b].replicas = ra;
    let moved = m.partitions[a].id;
    let name = (0..5000)
        .map(|i| format!("/moved{i}"))
        .find(|p| ring.owner_of_dir(p) == moved)
        .unwrap_or_else(|| panic!("no name on partition {moved}"));
    assert_ne!(old.primary_of(moved), m.primary_of(moved));
    (m, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_client_is_redirected_and_stale_server_is_updated() {
    let tc = TestCluster::start(4);
    let old_client = tc.client();
    // The cluster raises its protocol floor within a second of start (a map change of its
    // own): the maps below follow the map after it.
    let base = floor_raised(&tc).await;
    let e = base.epoch;
    let (m2, dir) = newer_map(&base, e + 1);

    // An admin client (root) installs epoch 2: committed through the Raft group, then
    // followed by every server.
    let admin = tc.client_as(
        m2.clone(),
        std::time::Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    let installed = admin
        .install_map(m2.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(installed, myriad_client::Installed::Yes);
    tc.client_with(m2.clone(), std::time::Duration::from_secs(10))
        .mkdir(&dir, 0o755)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The old client sends /dir/f to the server that no longer serves its partition, gets a
    // redirect with epoch 2, retries.
    c_create(&old_client, &format!("{dir}/f")).await;
    assert_eq!(
        old_client.map().epoch,
        e + 1,
        "client adopted the newer map"
    );
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
            .all(|(_, r)| r.as_ref().map(|c| c.epoch == e + 1).unwrap_or(false))
    );

    // The map file was rewritten by the servers, so restarts keep the newer map.
    let on_disk =
        ClusterMap::from_json(&std::fs::read_to_string(tc.map_file()).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(on_disk.epoch, e + 1);

    // An administrator's client that is ahead (one epoch more, same placement) pushes its
    // map to the servers it talks to (a proposal to the group).
    let mut m3 = m2.clone();
    m3.epoch = e + 2;
    let ahead = tc.client_as(
        m3,
        std::time::Duration::from_secs(10),
        myriad_client::Caller::root(),
    );
    assert!(ahead.stat(&format!("{dir}/f")).await.is_ok());
    let owner = ahead.owner_of_entry(&format!("{dir}/f"));
    let server = m2.primary_of(owner).unwrap_or_default();
    assert_eq!(
        ahead.counters(server).await.map(|c| c.epoch).ok(),
        Some(e + 2)
    );
}

/// The cluster's map once its protocol floor was raised to this build's protocol.
pub async fn floor_raised(tc: &TestCluster) -> ClusterMap {
    let client = tc.client();
    for _ in 0..200 {
        let map = client.newest_map().await;
        if map.ext.protocol_floor == myriad_proto::PROTOCOL_VERSION {
            return map;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the protocol floor was never raised");
}

async fn c_create(c: &myriad_client::Client, path: &str) {
    c.create(path, 0o644, true, b"data")
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
}
