//! Who this process's clients are: the zone they read from (`--zone`, or the one the map
//! gives this host), set once at start.

use std::sync::OnceLock;

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
    myriad_client::setup::zone_of_this_host(map)
}

pub use myriad_client::setup::current_caller;
