//! Who made a FUSE request: uid and gid come with the request; supplementary groups are read
//! from `/proc/PID/status` (cached briefly per process, since a process's groups rarely
//! change and reading /proc on every call would cost more than the request).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use myriad_proto::{Caller, limits};

const GROUPS_CACHE_TTL: Duration = Duration::from_secs(2);
const GROUPS_CACHE_MAX: usize = 4096;

/// Per pid: when read, for which uid and gid, and the groups.
type Seen = (Instant, u32, u32, Vec<u32>);

#[derive(Default)]
pub struct Callers {
    cache: Mutex<HashMap<u32, Seen>>,
}

impl Callers {
    pub fn caller(&self, pid: u32, uid: u32, gid: u32) -> Caller {
        if uid == 0 {
            // Root passes every permission check; its groups do not matter.
            return Caller {
                uid,
                gid,
                groups: Vec::new(),
            };
        }
        let mut g = match self.cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some((at, u, gi, groups)) = g.get(&pid)
            && at.elapsed() < GROUPS_CACHE_TTL
            && *u == uid
            && *gi == gid
        {
            return Caller {
                uid,
                gid,
                groups: groups.clone(),
            };
        }
        let groups = read_groups(pid);
        if g.len() >= GROUPS_CACHE_MAX {
            g.clear();
        }
        g.insert(pid, (Instant::now(), uid, gid, groups.clone()));
        Caller { uid, gid, groups }
    }
}

fn read_groups(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .take(limits::GROUPS_MAX)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_groups_and_root_needs_none() {
        let c = Callers::default();
        let me = std::process::id();
        let mine = read_groups(me);
        assert_eq!(c.caller(me, 1000, 1000).groups, mine);
        assert!(c.caller(me, 0, 0).groups.is_empty());
        assert!(
            read_groups(u32::MAX).is_empty(),
            "no such process: no groups"
        );
    }
}
