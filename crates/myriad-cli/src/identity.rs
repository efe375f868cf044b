use std::sync::OnceLock;

use myriad_client::Caller;

static ZONE: OnceLock<String> = OnceLock::new();

/// Sets the zone this process's clients are in (the global `--zone`); once, at start.
pub fn set_client_zone(zone: Option<String>) {
    let _ = ZONE.set(zone.unwrap_or_default());
}

/// The zone this process's clients are in (`""`: not given).
pub fn client_zone() -> &'static str {
    ZONE.get().map_or("", String::as_str)
}

/// The zone of this process's clients of the cluster `map`: the one given (`--zone`,
/// `MYRIAD_ZONE`), else that of the servers running beside it (docs/zones.md "Nearest
/// copy"), else none.
pub fn zone_in(map: &myriad_client::ClusterMap) -> String {
    let given = client_zone();
    if !given.is_empty() {
        return given.to_string();
    }
    zone_beside(map, |ip| {
        std::net::UdpSocket::bind(std::net::SocketAddr::new(ip, 0)).is_ok()
    })
}

/// The zone of the servers of `map` whose address is one of this host's (`is_local`),
/// when they all are in the same one. Loopback addresses say nothing (every server of a
/// cluster on one machine has one); nor do names that are not IP addresses.
fn zone_beside(
    map: &myriad_client::ClusterMap,
    is_local: impl Fn(std::net::IpAddr) -> bool,
) -> String {
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

/// The calling process's uid, gid and supplementary groups: what the servers record as owner.
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

#[cfg(test)]
mod tests {
    use super::zone_beside;
    use myriad_client::ClusterMap;

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
}
