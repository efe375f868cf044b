//! Issue 49: exercisers through a mount while servers are killed with kill -9 and
//! started again, one after another. The mount answers changes once applied; a server that
//! dies before its copies have them loses them, and the mount, which kept them, sends them
//! again (docs/fuse.md "Keeping answered changes until they are durable"). Every read must
//! match the exercisers' models, no fsync may fail, and fsck is clean afterwards.
//!
//! Before the mount kept its changes, fsx failed here at the second kill with `fsync: EIO`
//! (a change the dead primary answered was gone).

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use myriad_client::NodeId;

use crate::harness::TestCluster;
use crate::mount::Mount;

/// How long a server runs between kills, and how long it stays dead.
const ALIVE: Duration = Duration::from_secs(4);
const DEAD: Duration = Duration::from_secs(1);

fn steps(default: u64) -> u64 {
    std::env::var("MYRIAD_CHAOS_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fsx_on(file: PathBuf, seed: u64, steps: u64) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut cfg = crate::fsx::FsxConfig::new(seed, steps);
        cfg.reopen_every = 100;
        crate::fsx::run(&cfg, &[file]);
    })
}

/// Kills each server in turn (kill -9), starts it again and waits for it, until every
/// exerciser in `runs` is done; then joins them (a failure shows the mount's log) and
/// checks that the mount reported no loss and fsck is clean. Returns the number of kills.
fn kill_while(cl: &TestCluster, m: &Mount, runs: Vec<(&str, JoinHandle<()>)>) -> u32 {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let client = cl.client();
    let started = Instant::now();
    let mut kills = 0;
    for node in (1..=4).cycle().map(NodeId) {
        std::thread::sleep(ALIVE);
        if runs.iter().all(|(_, t)| t.is_finished()) {
            break;
        }
        eprintln!(
            "chaos: kill -9 of server {node} at {:.0} s",
            started.elapsed().as_secs_f64()
        );
        cl.kill9(node);
        kills += 1;
        std::thread::sleep(DEAD);
        cl.restart(node);
        rt.block_on(cl.wait_up(&client, node));
    }
    for (name, t) in runs {
        if let Err(p) = t.join() {
            let log = m.log_text();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(150)..].join("\n");
            eprintln!("--- {name} failed; the mount's last lines ---\n{tail}");
            std::panic::resume_unwind(p);
        }
    }
    eprintln!(
        "chaos: {kills} kills in {:.0} s, the exercisers clean",
        started.elapsed().as_secs_f64()
    );
    let log = m.log_text();
    assert!(
        !log.contains("could not be confirmed durable") && !log.contains("was lost"),
        "the mount reported a loss: {log}"
    );
    rt.block_on(cl.fsck_until_clean());
    kills
}

/// fsx through a mount under kill -9 loops: data, sizes and fsync.
#[test]
fn fsx_through_a_mount_loses_nothing_while_servers_are_killed() {
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    let m = Mount::new(&cl, &[]);
    let runs = vec![
        ("fsx a", fsx_on(m.path("a"), 49, steps(8_000))),
        ("fsx b", fsx_on(m.path("b"), 50, steps(8_000))),
    ];
    let kills = kill_while(&cl, &m, runs);
    assert!(
        kills >= 2,
        "only {kills} kills: the exercisers ran too short to test this"
    );
}

/// fsx and nsx (the namespace exerciser) together under kill -9 loops, longer: by hand
/// (`cargo test -p myriad-cli --test it chaos_long -- --ignored --nocapture`,
/// MYRIAD_CHAOS_STEPS, 15,000 by default; about 7 minutes, too long for the suite).
/// A parent's `nlink` and times left behind by a change answered while the parent's entry
/// failed over was fixed (`dirtimes.rs`: touches are sent again), and a ctime that moved
/// after a chmod of a file that had a second name (answered behind: nsx seed 49 step
/// 6889, also without kills). Left open (issue 49's note): once in four earlier runs an
/// `rm -r` met ENOENT for an entry it had just listed.
#[test]
#[ignore = "long (7 minutes): run by hand"]
fn chaos_long() {
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    let m = Mount::new(&cl, &[]);
    let steps = steps(15_000);
    let reference = crate::nsx::RefTmpfs::new();
    let nsx = {
        let under_test = m.path("nsx");
        let reference = reference.tree("nsx");
        std::fs::create_dir(&under_test).unwrap_or_else(|e| panic!("{e}"));
        std::thread::spawn(move || {
            crate::nsx::run(
                &crate::nsx::for_the_mount(49, steps),
                &under_test,
                &reference,
            );
        })
    };
    let runs = vec![("fsx", fsx_on(m.path("fsx"), 49, steps)), ("nsx", nsx)];
    kill_while(&cl, &m, runs);
}
