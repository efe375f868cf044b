//! Ports for the servers of a local cluster (`cluster up`, `node add`): outside the
//! kernel's range of ephemeral ports where it leaves room, so that a server killed and
//! started again on its port (`cluster start-node`) finds the port free. A port of that
//! range may meanwhile become the local end of any outgoing connection on the machine (a
//! test met it: "cannot listen on 127.0.0.1:43509: Address already in use").

use std::net::TcpListener;

use anyhow::Context;

/// The lowest port looked at below the ephemeral range.
const LOWEST: u16 = 10_000;
/// At most this many ports are tried before falling back to one the kernel picks.
const TRIES_MAX: u16 = 2_000;

/// A listener on 127.0.0.1 for a new server of a local cluster.
pub fn listener() -> anyhow::Result<TcpListener> {
    if let Some((lo, hi)) = below_ephemeral() {
        // From a random place: clusters made side by side rarely try the same ports.
        let span = hi - lo + 1;
        let start = rand::random::<u16>() % span;
        for i in 0..span.min(TRIES_MAX) {
            let port = lo + (start + i) % span;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                return Ok(l);
            }
        }
    }
    TcpListener::bind("127.0.0.1:0").context("cannot bind a port on 127.0.0.1")
}

/// The ports from `LOWEST` up to the kernel's first ephemeral port, if it leaves a
/// thousand or more (Linux's default range starts at 32768).
fn below_ephemeral() -> Option<(u16, u16)> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let first: u16 = range.split_whitespace().next()?.parse().ok()?;
    (first > LOWEST + 1_000).then(|| (LOWEST, first - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_port_is_outside_the_ephemeral_range() {
        let l = listener().unwrap_or_else(|e| panic!("{e}"));
        let port = l.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
        match below_ephemeral() {
            Some((lo, hi)) => assert!((lo..=hi).contains(&port), "port {port}"),
            None => assert_ne!(port, 0),
        }
    }
}
