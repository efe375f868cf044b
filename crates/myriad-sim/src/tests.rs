//! The simulation's parts together: a server on a simulated disk.

use std::sync::Arc;
use std::time::Duration;

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, Keyring};
use myriad_placement::NodeId;
use myriad_server::ServerConfig;
use myriad_server::embed::EmbeddedServer;

use crate::authority::{Leases, SimAuthority};
use crate::disk::SimDisk;
use crate::net::{CLIENTS, Endpoint, Net, NetFaults};
use crate::rng::SimRng;
use crate::trace::Trace;

const S1: NodeId = NodeId(1);

/// A server whose disk fails an fsync stops (as the process exits): it answers nothing
/// more, so its lease lapses and its partitions fail over.
#[tokio::test(start_paused = true)]
async fn a_server_whose_disk_fails_an_fsync_stops() {
    let keys = Keyring::from_secret(&[7u8; 32]);
    let map = ClusterMap::build(1, &["sim-1".to_string()], 2, 1);
    let net = Net::new(1, NetFaults::none(), SimRng::new(1), Trace::new());
    let disk = Arc::new(SimDisk::default());
    let leases = Arc::new(Leases::default());
    leases.grant(S1, tokio::time::Instant::now() + Duration::from_secs(3600));
    let config = ServerConfig::new(S1, std::env::temp_dir(), map.clone(), keys.clone());
    let server = EmbeddedServer::new(
        config,
        Arc::new(disk.handle()),
        Arc::new(Endpoint::new(net.clone(), S1)),
        Arc::new(SimAuthority {
            me: S1,
            leases,
            proposals: Arc::default(),
        }),
        Duration::from_millis(1),
        tokio::time::Instant::now(),
    )
    .map(Arc::new)
    .unwrap_or_else(|e| panic!("server: {e}"));
    net.set_server(S1, Some(server.clone()));
    server.open().await.unwrap_or_else(|e| panic!("open: {e}"));
    let mut config = ClientConfig::new(map, Caller::root(), keys);
    config.id = 1;
    let client = Client::with_transport(config, Arc::new(Endpoint::new(net.clone(), CLIENTS)))
        .unwrap_or_else(|e| panic!("client: {e}"));
    client
        .mkdir("/a", 0o755)
        .await
        .unwrap_or_else(|e| panic!("mkdir while the disk is well: {e}"));
    assert!(!server.stopped());
    disk.fail_next_sync();
    assert!(
        client.mkdir("/b", 0o755).await.is_err(),
        "a write acknowledged over a failed fsync"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(server.stopped(), "the server goes on after a failed fsync");
    assert!(net.running(S1).is_none(), "a stopped server still answers");
}
