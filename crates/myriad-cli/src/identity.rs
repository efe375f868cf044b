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
