//! A client made from what a user has at hand: the cluster map file, the key file beside it
//! (or one given), the calling process's identity and its zone. The CLI, the mount and the
//! language bindings all start their clients from here, so they refuse the same bad key
//! files with the same words.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use myriad_placement::ClusterMap;
use myriad_proto::auth::Keyring;
use myriad_proto::{Caller, WireError};

/// File name of the cluster secret beside a local cluster's map.
pub const SECRET_FILE: &str = "cluster.secret";
/// File name of the client key beside a local cluster's map.
pub const CLIENT_KEY_FILE: &str = "client.key";

/// Why a client could not be set up: a sentence for the user, naming the file at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError(pub String);

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SetupError {}

/// Reads a key file, refusing one that too many may read: a cluster secret only its owner
/// (0600 or 0700), a client key its owner's group too (0640), never everyone.
pub fn load_keys(path: &Path) -> Result<Keyring, SetupError> {
    let unreadable =
        |e: std::io::Error| SetupError(format!("cannot read key file {}: {e}", path.display()));
    let mode = std::fs::metadata(path)
        .map_err(unreadable)?
        .permissions()
        .mode()
        & 0o777;
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let keys = Keyring::parse(&text)
        .map_err(|e| SetupError(format!("bad key file {}: {e}", path.display())))?;
    let allowed = if keys.has_cluster_secret() {
        0o700
    } else {
        0o750
    };
    if mode & !allowed != 0 {
        return Err(SetupError(format!(
            "key file {} can be read by others (mode {mode:o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(keys)
}

/// The key file a client uses: `explicit` (`--secret-file`, MYRIAD_SECRET_FILE), else the
/// cluster secret beside the cluster map `map`, else the client key beside it. A cluster
/// given by addresses has no file beside which to look: the key must be given.
pub fn client_keys(explicit: Option<&Path>, map: Option<&Path>) -> Result<Keyring, SetupError> {
    if let Some(p) = explicit {
        return load_keys(p);
    }
    if let Some(m) = map
        && let ClusterSource::Seeds(_) = ClusterSource::parse(&m.to_string_lossy())
    {
        return Err(SetupError(format!(
            "no cluster key: a cluster given by address ({}) needs --secret-file FILE or \
             MYRIAD_SECRET_FILE (its `{CLIENT_KEY_FILE}`, or `{SECRET_FILE}` to administer it)",
            m.display()
        )));
    }
    let dir = map.and_then(Path::parent).unwrap_or(Path::new("."));
    for name in [SECRET_FILE, CLIENT_KEY_FILE] {
        let p = dir.join(name);
        if p.exists() {
            return load_keys(&p);
        }
    }
    Err(SetupError(format!(
        "no cluster key: pass --secret-file FILE or set MYRIAD_SECRET_FILE (a cluster's `{SECRET_FILE}` or `{CLIENT_KEY_FILE}`; none beside the map in {})",
        dir.display()
    )))
}

/// The cluster map `given` names: the map file there, or the map the servers at those
/// addresses serve (asked with `keys`, within `timeout` each). Callable from anywhere,
/// inside an async runtime too (the servers are asked on a thread of its own).
pub fn load_cluster(
    given: &Path,
    keys: &Keyring,
    timeout: std::time::Duration,
) -> Result<ClusterMap, SetupError> {
    match ClusterSource::parse(&given.to_string_lossy()) {
        ClusterSource::File(p) => load_map(&p),
        ClusterSource::Seeds(seeds) => {
            let keys = keys.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| SetupError(format!("cannot start a runtime: {e}")))?;
                rt.block_on(map_from_seeds(&seeds, keys, timeout))
            })
            .join()
            .map_err(|_| SetupError("asking the servers for the map failed".into()))?
        }
    }
}

/// The cluster map in the file at `path` (what `myriad cluster up` prints).
pub fn load_map(path: &Path) -> Result<ClusterMap, SetupError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SetupError(format!("cannot read cluster map {}: {e}", path.display())))?;
    ClusterMap::from_json(&text)
        .map_err(|e| SetupError(format!("bad cluster map {}: {e}", path.display())))
}

/// Where a client finds its cluster: a map file, or addresses of servers to ask for the
/// current map (`host:port[,host:port...]`; IPv6 as `[addr]:port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSource {
    File(std::path::PathBuf),
    Seeds(Vec<String>),
}

impl ClusterSource {
    /// `given` as a map file if one exists there, else as a list of server addresses if
    /// it reads as one, else as a map file (whose absence is then the error).
    #[must_use]
    pub fn parse(given: &str) -> ClusterSource {
        let path = Path::new(given);
        if path.exists() {
            return ClusterSource::File(path.to_path_buf());
        }
        match parse_seeds(given) {
            Some(seeds) => ClusterSource::Seeds(seeds),
            None => ClusterSource::File(path.to_path_buf()),
        }
    }
}

/// `host:port[,host:port...]` (IPv6 hosts in brackets), or `None` if it is not such a list.
#[must_use]
pub fn parse_seeds(s: &str) -> Option<Vec<String>> {
    let seeds: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let ok = |a: &str| {
        let (host, port) = a.rsplit_once(':')?;
        let host_ok = if let Some(inner) = host.strip_prefix('[') {
            inner
                .strip_suffix(']')
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
        } else {
            !host.is_empty()
                && !host.contains('/')
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        };
        (host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)).then_some(())
    };
    (!seeds.is_empty() && seeds.iter().all(|a| ok(a).is_some())).then_some(seeds)
}

/// The current cluster map as the first of `seeds` that answers serves it, asked with
/// `keys` (a client key is enough); each seed within `timeout`. The error names every
/// seed's failure.
pub async fn map_from_seeds(
    seeds: &[String],
    keys: Keyring,
    timeout: std::time::Duration,
) -> Result<ClusterMap, SetupError> {
    ask_seeds(seeds, keys, timeout).await.map_err(|e| e.why)
}

/// `map_from_seeds`, asked again and again for up to `within` while no seed could answer
/// yet (each failure transient: servers still starting, the network not up yet, as when
/// every host of a cluster boots at once). A seed that refuses (a wrong key) ends it.
pub async fn map_from_seeds_waiting(
    seeds: &[String],
    keys: Keyring,
    timeout: std::time::Duration,
    within: std::time::Duration,
) -> Result<ClusterMap, SetupError> {
    keep_trying(
        within,
        || ask_seeds(seeds, keys.clone(), timeout),
        |e| e.transient,
        "waiting for the cluster",
    )
    .await
    .map_err(|e| e.why)
}

/// Why no seed gave the map, and whether every seed's failure was transient.
struct SeedsFailed {
    why: SetupError,
    transient: bool,
}

impl std::fmt::Display for SeedsFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.why.fmt(f)
    }
}

/// Runs `attempt` until it succeeds, again after each failure that `again` says may pass
/// (pausing 0.2 s, doubling up to 5 s, and logging `waiting` with the error), for up to
/// `within`; any other failure, or the last one, is returned.
pub async fn keep_trying<T, E: std::fmt::Display, F>(
    within: std::time::Duration,
    mut attempt: impl FnMut() -> F,
    again: impl Fn(&E) -> bool,
    waiting: &str,
) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = std::time::Duration::from_millis(200);
    loop {
        match attempt().await {
            Err(e) if again(&e) && tokio::time::Instant::now() + pause < deadline => {
                tracing::warn!("{waiting}: {e:#}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
            r => return r,
        }
    }
}

/// The map from the first seed that gives it; else why not.
async fn ask_seeds(
    seeds: &[String],
    keys: Keyring,
    timeout: std::time::Duration,
) -> Result<ClusterMap, SeedsFailed> {
    use myriad_net::{Pool, PoolConfig};
    use myriad_proto::{Endpoints, PeerKind};
    let pool = Pool::new(PoolConfig {
        me: PeerKind::Client,
        zone: String::new(),
        keys: std::sync::Arc::new(keys),
        connect_timeout: timeout,
        request_timeout: timeout,
    });
    let mut failed = Vec::new();
    let mut transient = true;
    for seed in seeds {
        let get_map = myriad_proto::ask::get_map();
        let got = pool
            .call_with_timeout(
                seed,
                0,
                Endpoints::SERVER,
                &Caller::root(),
                &get_map.request,
                timeout,
            )
            .await;
        match got.map(|r| get_map.answer.of::<WireError>(r)) {
            Ok(Ok(m)) => return Ok(*m),
            Ok(Err(other)) => {
                transient = false;
                failed.push(format!("{seed}: {other}"));
            }
            Err(e) => {
                transient &= e.is_transient();
                failed.push(format!("{seed}: {e}"));
            }
        }
    }
    Err(SeedsFailed {
        why: SetupError(format!(
            "no server gave the cluster map ({})",
            failed.join("; ")
        )),
        transient,
    })
}

/// The calling process's uid, gid and supplementary groups: what the servers record as owner.
#[must_use]
pub fn current_caller() -> Caller {
    // SAFETY: getuid/getgid cannot fail; getgroups writes at most `n` entries into `buf`.
    unsafe {
        let uid = libc::getuid();
        let gid = libc::getgid();
        let mut buf = vec![0 as libc::gid_t; 256];
        let n = libc::getgroups(256, buf.as_mut_ptr());
        buf.truncate(usize::try_from(n).unwrap_or(0));
        Caller {
            uid,
            gid,
            groups: buf,
        }
    }
}

/// The zone of the servers of `map` running on this host (docs/zones.md "Nearest copy"),
/// or `""`.
#[must_use]
pub fn zone_of_this_host(map: &ClusterMap) -> String {
    zone_beside(map, |ip| {
        std::net::UdpSocket::bind(std::net::SocketAddr::new(ip, 0)).is_ok()
    })
}

/// The zone of the servers of `map` whose address is one of this host's (`is_local`),
/// when they all are in the same one. Loopback addresses say nothing (every server of a
/// cluster on one machine has one); nor do names that are not IP addresses.
pub fn zone_beside(map: &ClusterMap, is_local: impl Fn(std::net::IpAddr) -> bool) -> String {
    let mut zones = map.nodes.iter().filter_map(|n| {
        let ip = n.addr.parse::<std::net::SocketAddr>().ok()?.ip();
        (!ip.is_loopback() && !ip.is_unspecified() && is_local(ip)).then_some(n.zone.as_str())
    });
    let Some(first) = zones.next() else {
        return String::new();
    };
    if zones.all(|z| z == first) {
        first.to_string()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(addrs: &[&str], zones: &[&str]) -> ClusterMap {
        let addrs: Vec<String> = addrs.iter().map(|a| (*a).to_string()).collect();
        let zones: Vec<String> = zones.iter().map(|z| (*z).to_string()).collect();
        ClusterMap::build_in_zones(1, &addrs, &zones, 1, 1)
    }

    #[test]
    fn a_client_beside_servers_of_one_zone_is_in_it() {
        let m = map(
            &["10.0.0.1:7000", "10.0.0.2:7000", "10.0.1.1:7000"],
            &["a", "a", "b"],
        );
        let here = |ip: std::net::IpAddr| ip.to_string().starts_with("10.0.0.");
        assert_eq!(zone_beside(&m, here), "a");
        let elsewhere = |ip: std::net::IpAddr| ip.to_string() == "10.0.1.1";
        assert_eq!(zone_beside(&m, elsewhere), "b");
        assert_eq!(zone_beside(&m, |_| false), "", "no server here");
        assert_eq!(zone_beside(&m, |_| true), "", "servers of two zones here");
        // Every server of a cluster on one machine listens on loopback: no zone from it.
        let local = map(&["127.0.0.1:7001", "127.0.0.1:7002"], &["a", "b"]);
        assert_eq!(zone_beside(&local, |_| true), "");
        let named = map(&["node1:7000"], &["a"]);
        assert_eq!(zone_beside(&named, |_| true), "");
    }

    #[test]
    fn key_files_others_may_read_are_refused() {
        let dir = std::env::temp_dir().join(format!("myriad-setup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let p = dir.join("k");
        let line = myriad_proto::auth::client_key_line(&[7u8; myriad_proto::auth::KEY_BYTES]);
        assert!(std::fs::write(&p, format!("{line}\n")).is_ok());
        let chmod = |m| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m));
        assert!(chmod(0o640).is_ok());
        assert!(
            load_keys(&p).is_ok(),
            "a client key its group may read is fine"
        );
        assert!(chmod(0o644).is_ok());
        let e = load_keys(&p).err().map(|e| e.0).unwrap_or_default();
        assert!(e.contains("can be read by others"), "{e}");
        let missing = client_keys(None, Some(&dir.join("nothing/cluster.json")));
        assert!(missing.is_err_and(|e| e.0.contains("no cluster key")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;

    #[test]
    fn seeds_are_host_port_lists_and_anything_else_a_file() {
        assert_eq!(
            parse_seeds("h1:7401,10.0.0.2:7401, [fd00::3]:7401"),
            Some(vec![
                "h1:7401".to_string(),
                "10.0.0.2:7401".to_string(),
                "[fd00::3]:7401".to_string()
            ])
        );
        for bad in [
            "",
            "/tmp/c/cluster.json",
            "h1",
            "h1:0",
            "h1:x",
            "[fd00::3:7401",
            "a/b:1",
        ] {
            assert_eq!(parse_seeds(bad), None, "{bad}");
        }
        assert_eq!(
            ClusterSource::parse("10.0.0.1:7401"),
            ClusterSource::Seeds(vec!["10.0.0.1:7401".into()])
        );
        assert_eq!(
            ClusterSource::parse("/no/such/cluster.json"),
            ClusterSource::File("/no/such/cluster.json".into())
        );
    }

    /// Failures that may pass are tried again until the time runs out; others end it.
    #[tokio::test(start_paused = true)]
    async fn keep_trying_retries_only_what_may_pass_and_only_for_so_long() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let calls = AtomicU32::new(0);
        let within = std::time::Duration::from_secs(60);
        let flaky = || async {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            if n < 3 {
                Err(format!("not yet {n}"))
            } else {
                Ok(n)
            }
        };
        let got = keep_trying(within, flaky, |_| true, "test").await;
        assert_eq!(got, Ok(3));
        calls.store(0, Ordering::SeqCst);
        let refused = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>("refused".to_string())
        };
        assert!(
            keep_trying(within, refused, |_| false, "test")
                .await
                .is_err()
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a final failure is not retried"
        );
        let start = tokio::time::Instant::now();
        let never = || async { Err::<(), _>("down".to_string()) };
        assert!(keep_trying(within, never, |_| true, "test").await.is_err());
        assert!(start.elapsed() <= within, "{:?}", start.elapsed());
    }
}
