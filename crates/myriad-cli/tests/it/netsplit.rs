//! A network partition that cuts a whole zone off (docs/replication.md "Leases",
//! docs/zones.md): five servers, each a host of its own in a network namespace (veth into a
//! bridge), in zones a (1, 2), b (3) and c (4, 5), three copies of everything spread over
//! the three zones, `/pa` pinned to zone a and `/pc` to zone c. Zone c is cut off: its side
//! refuses reads and writes (its leases lapse), the majority fails its partitions over and
//! goes on writing, in `/pa` too, while `/pc` (every copy in zone c) waits; after healing,
//! zone c rejoins as backups and every copy is equal again, with every acknowledged file
//! there once, `/pc`'s too, and nothing the minority was asked to write.

use myriad_client::NodeId;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use myriad_client::{Caller, Client, ClientConfig, ClusterMap, Keyring};

use crate::harness::BIN;

const SERVERS: u32 = 5;

/// The hosts: namespaces `{tag}n{k}` at 10.{net}.0.{k}, veths `{tag}v{k}` on bridge
/// `{tag}b1` (the majority side, where this test's own client sits at .254) or `{tag}b2`.
struct Hosts {
    tag: String,
    net: u32,
    dir: tempfile::TempDir,
    servers: Vec<Child>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Hosts {
    fn new() -> Hosts {
        let id = std::process::id() % 10_000;
        let tag = format!("my{id}");
        let net = 100 + id % 100;
        let dir = tempfile::Builder::new()
            .prefix("myriad-netsplit-")
            .tempdir()
            .unwrap_or_else(|e| panic!("{e}"));
        let h = Hosts {
            tag,
            net,
            dir,
            servers: Vec::new(),
        };
        for b in ["b1", "b2"] {
            ip(&["link", "add", &h.name(b), "type", "bridge"]);
            ip(&["link", "set", &h.name(b), "up"]);
        }
        ip(&[
            "addr",
            "add",
            &format!("10.{}.0.254/24", h.net),
            "dev",
            &h.name("b1"),
        ]);
        for k in 1..=SERVERS {
            let ns = h.ns(k);
            let (v, p) = (h.name(&format!("v{k}")), h.name(&format!("p{k}")));
            ip(&["netns", "add", &ns]);
            ip(&["link", "add", &v, "type", "veth", "peer", "name", &p]);
            ip(&["link", "set", &p, "netns", &ns]);
            ip(&["link", "set", &v, "master", &h.name("b1"), "up"]);
            let addr = format!("{}/24", h.addr(k));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", &p]);
            ip(&["-n", &ns, "link", "set", &p, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        h
    }

    fn name(&self, what: &str) -> String {
        format!("{}{what}", self.tag)
    }

    fn ns(&self, k: u32) -> String {
        self.name(&format!("n{k}"))
    }

    fn addr(&self, k: u32) -> String {
        format!("10.{}.0.{k}", self.net)
    }

    fn map_file(&self) -> PathBuf {
        self.dir.path().join("cluster.json")
    }

    /// Starts server `k` inside its namespace, with its own copy of the map file.
    fn start(&mut self, k: u32, map: &ClusterMap) {
        let own_map = self.dir.path().join(format!("map-{k}.json"));
        std::fs::write(&own_map, map.to_json()).unwrap_or_else(|e| panic!("{e}"));
        let log = std::fs::File::create(self.dir.path().join(format!("node-{k}.log")))
            .unwrap_or_else(|e| panic!("{e}"));
        let child = self
            .in_ns(k)
            .args([BIN, "server", "--data-dir"])
            .arg(self.dir.path().join(format!("node-{k}")))
            .arg("--cluster-map")
            .arg(&own_map)
            .args(["--node-id", &k.to_string()])
            .arg("--secret-file")
            .arg(self.dir.path().join("cluster.secret"))
            .args(["--listen", &format!("{}:7000", self.addr(k))])
            // No re-replication during the test: healing must bring the minority's copies
            // up to date.
            .args(["--down-grace-secs", "3600"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap_or_else(|e| panic!("{e}")))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start server {k}: {e}"));
        self.servers.push(child);
    }

    /// Moves the veths of `ks` to bridge `b` ("b1": with the majority, "b2": cut off).
    fn attach(&self, ks: &[u32], b: &str) {
        for &k in ks {
            ip(&[
                "link",
                "set",
                &self.name(&format!("v{k}")),
                "master",
                &self.name(b),
            ]);
        }
    }

    /// A command that runs in server `k`'s network namespace only. (`nsenter --net`, not
    /// `ip netns exec`: that one also gives the process a copy of the mount namespace, which
    /// would keep every FUSE mount of other tests alive in it after they unmount.)
    fn in_ns(&self, k: u32) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.ns(k))).arg("--");
        c
    }

    /// Runs the CLI inside server `k`'s namespace (a client on that side of the cut).
    fn cli_in(&self, k: u32, args: &[&str]) -> std::process::Output {
        self.in_ns(k)
            .args([BIN, "--cluster"])
            .arg(self.map_file())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn log_tail(&self, k: u32) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(format!("node-{k}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| !l.contains("lsm_tree") && !l.contains("fjall"))
            .collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for k in 1..=SERVERS {
                eprintln!("---- server {k} ----\n{}", self.log_tail(k));
            }
        }
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        for k in 1..=SERVERS {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(k)])
                .output();
        }
        for b in ["b1", "b2"] {
            let _ = Command::new("ip")
                .args(["link", "del", &self.name(b)])
                .output();
        }
    }
}

fn client(map: &ClusterMap, keys: &Keyring, timeout: Duration) -> Client {
    let mut cfg = ClientConfig::new(map.clone(), Caller::root(), keys.clone());
    cfg.request_timeout = timeout;
    Client::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn all_serving(c: &Client) -> Option<()> {
    c.all_counters()
        .await
        .iter()
        .all(|(_, r)| r.as_ref().is_ok_and(|s| s.serving))
        .then_some(())
}

fn data(tag: &str, i: usize) -> Vec<u8> {
    format!("{tag}-{i}-").repeat(50 + i % 200).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_cut_off_refuses_on_its_side_its_pinned_tree_waits_and_healing_loses_nothing() {
    let mut h = Hosts::new();
    let addrs: Vec<String> = (1..=SERVERS)
        .map(|k| format!("{}:7000", h.addr(k)))
        .collect();
    let zones: Vec<String> = ["a", "a", "b", "c", "c"].map(String::from).to_vec();
    let map = ClusterMap::build_in_zones(1, &addrs, &zones, 4, 3);
    std::fs::write(h.map_file(), map.to_json()).unwrap_or_else(|e| panic!("{e}"));
    let secret = h.dir.path().join("cluster.secret");
    let init = Command::new(BIN)
        .args(["cluster", "init", "--secret-file"])
        .arg(&secret)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let keys = Keyring::parse(&std::fs::read_to_string(&secret).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    for k in 1..=SERVERS {
        h.start(k, &map);
    }
    let c = client(&map, &keys, Duration::from_secs(30));
    until("every server serving", Duration::from_secs(30), || {
        all_serving(&c)
    })
    .await;
    until("the root directory", Duration::from_secs(30), || async {
        c.stat("/").await.ok()
    })
    .await;
    for (root, zone) in [("/pa", "a"), ("/pc", "c")] {
        let out = Command::new(BIN)
            .arg("--cluster")
            .arg(h.map_file())
            .args(["policy", "set", root, "--zone", zone])
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "policy set {root}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let m = c.newest_map().await;
    assert_eq!(m.policies.len(), 2, "{:?}", m.policies);
    for p in &m.partitions {
        assert_eq!(m.zone_count(&p.replicas), m.zones_wanted(p), "{p:?}");
    }
    let mut acked: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for dir in ["/d", "/pa", "/pc"] {
        c.mkdir(dir, 0o755).await.unwrap_or_else(|e| panic!("{e}"));
        for i in 0..20 {
            let (p, d) = (format!("{dir}/before{i}"), data("before", i));
            c.create(&p, 0o644, true, &d)
                .await
                .unwrap_or_else(|e| panic!("{p}: {e}"));
            acked.insert(p, d);
        }
    }

    // Cut zone c (servers 4 and 5) off (they still see each other).
    h.attach(&[4, 5], "b2");
    let cut = Instant::now();

    // The minority: a client beside server 4 can neither write nor read once the leases
    // ran out (3 s at most; its requests also wait out the failover's timeouts).
    tokio::time::sleep(Duration::from_secs(4)).await;
    eprintln!(
        "netsplit: minority checks start {:?} after the cut",
        cut.elapsed()
    );
    let local = h.dir.path().join("minority.txt");
    std::fs::write(&local, b"written on the minority side").unwrap_or_else(|e| panic!("{e}"));
    let local_s = local.to_string_lossy().into_owned();
    let mut minority_names = Vec::new();
    // (Each CLI request waits out its whole deadline: one write and one read.)
    for i in 0..1 {
        let name = format!("/d/minority{i}");
        let out = h.cli_in(4, &["--timeout-ms", "4000", "put", &local_s, &name]);
        assert!(
            !out.status.success(),
            "the minority side accepted a write of {name}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        minority_names.push(name);
    }
    let out = h.cli_in(4, &["--timeout-ms", "4000", "stat", "/d/before0"]);
    assert!(!out.status.success(), "the minority side served a read");

    eprintln!(
        "netsplit: minority checks done {:?} after the cut",
        cut.elapsed()
    );
    // The majority: writes go on (after the failover of the minority's partitions), in
    // the tree pinned to zone a too; every file written before the cut reads back but
    // those pinned to zone c, which wait for it.
    for dir in ["/d", "/pa"] {
        for i in 0..20 {
            let (p, d) = (format!("{dir}/during{i}"), data("during", i));
            c.create(&p, 0o644, true, &d)
                .await
                .unwrap_or_else(|e| panic!("{p} on the majority side: {e}"));
            acked.insert(p, d);
        }
    }
    for (p, d) in acked.iter().filter(|(p, _)| !p.starts_with("/pc/")) {
        let got = c
            .read_all(p)
            .await
            .unwrap_or_else(|e| panic!("{p} while zone c is cut off: {e}"));
        assert!(got == *d, "{p}: contents differ while zone c is cut off");
    }
    let impatient = client(&m, &keys, Duration::from_secs(3));
    assert!(
        impatient.stat("/pc/before0").await.is_err(),
        "a file pinned to zone c was served while zone c was cut off"
    );
    eprintln!(
        "netsplit: majority wrote 40 files and read 60 within {:?} of the cut",
        cut.elapsed()
    );
    let m = c.newest_map().await;
    assert!(
        !m.is_up(NodeId(4)) && !m.is_up(NodeId(5)),
        "the majority marked the minority down"
    );

    // Heal: the minority rejoins as backups and catches up.
    h.attach(&[4, 5], "b1");
    let healed = Instant::now();
    until("the minority back up", Duration::from_secs(60), || async {
        let m = c.newest_map().await;
        (m.is_up(NodeId(4)) && m.is_up(NodeId(5))).then_some(())
    })
    .await;
    until("every server serving", Duration::from_secs(60), || {
        all_serving(&c)
    })
    .await;
    let start = Instant::now();
    loop {
        let out = Command::new(BIN)
            .arg("--cluster")
            .arg(h.map_file())
            .arg("fsck")
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        if out.status.success() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "fsck not clean after healing: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    eprintln!(
        "netsplit: healed, every copy equal {:?} after reconnecting",
        healed.elapsed()
    );
    // Every acknowledged file, once, with its contents; nothing from the minority.
    for (p, d) in &acked {
        let got = c
            .read_all(p)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {p} lost: {e}"));
        assert!(got == *d, "{p}: contents differ");
    }
    let names: Vec<String> = c
        .readdir("/d")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|e| e.name)
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "a name listed twice");
    let in_d = acked.keys().filter(|p| p.starts_with("/d/")).count();
    assert_eq!(names.len(), in_d, "{names:?}");
    for n in &minority_names {
        assert!(
            c.stat(n).await.is_err(),
            "{n}, refused on the minority side, exists after healing"
        );
    }
}
