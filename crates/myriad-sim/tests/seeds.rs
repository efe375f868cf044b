//! The simulation in CI: a fixed set of seeds (docs/simulation.md), the regression seeds of
//! the bugs it found, exact replay, and proof that its checks catch a lost write.

use myriad_sim::{SimConfig, run};

fn check(cfg: &SimConfig) -> myriad_sim::Report {
    match run(cfg) {
        Ok(r) => r,
        Err(f) => panic!("{f}"),
    }
}

/// The busy configuration the bugs were found with: 6 clients, shards split above 8.
fn busy(seed: u64) -> SimConfig {
    SimConfig {
        clients: 6,
        ops_per_client: 400,
        split_entries: 8,
        ..SimConfig::new(seed)
    }
}

#[test]
fn the_ci_seed_set_keeps_every_invariant() {
    let mut ops = 0;
    for seed in 1..=24 {
        ops += check(&SimConfig::new(seed)).ops;
    }
    for seed in 2000..2024 {
        ops += check(&busy(seed)).ops;
    }
    assert!(ops >= 50_000, "{ops} operations");
}

/// Seeds that found bugs (each fixed, with a unit test beside the fix):
/// 1016: recovery undid a split whose owner was still waiting for its first step to be
///       durable; the owner revealed the child anyway, and names created in it were later
///       dropped (the split-listing flake). Fix: `Partition::begin` holds the txid live from
///       the moment the intent is visible; a split undone cannot commit.
/// 1031: a second split of a shard began while an earlier one was being undone; the first
///       one's cleanup unmapped the second's child. Fix: no split of a shard while an earlier
///       split's intent remains.
/// 3001: a mkdir that failed and was being undone held its name; the client's retry got
///       `AlreadyExists` for a directory that never came to be. Fix: a name held by an
///       operation under way is `Busy`.
/// 3059: one copy of a partition held an rmdir's intent the primary and the other copy did
///       not, at the same batch number (a history of its own from when it was primary); the
///       stream compared batch numbers only and never repaired it. Fix: batches carry a hash
///       chain, compared at stream start and by a primary catching up.
/// 5052: the simulation's own: a disk error just before the end left its server running
///       with a syncer that refuses every write; the healing now restarts it.
#[test]
fn regression_seeds_pass() {
    for seed in [1008, 1016, 1031, 3001, 3059, 5052] {
        check(&busy(seed));
    }
}

#[test]
fn a_seed_replays_exactly() {
    let a = check(&busy(1016));
    let b = check(&busy(1016));
    assert_eq!((a.events, a.digest), (b.events, b.digest));
    let c = check(&busy(1017));
    assert_ne!(a.digest, c.digest, "another seed is another run");
}

#[test]
fn the_checks_catch_a_disk_that_loses_acknowledged_writes() {
    let caught = (1..=10).any(|seed| {
        let cfg = SimConfig {
            broken_disk: true,
            ..busy(seed)
        };
        match run(&cfg) {
            Ok(_) => false,
            Err(f) => {
                assert!(
                    f.what.contains("acknowledged") || f.what.contains("stale"),
                    "{f}"
                );
                true
            }
        }
    });
    assert!(
        caught,
        "ten runs on a disk that loses writes and no check failed"
    );
}

/// Open (found last, not fixed yet): a listing of the splitting directory misses three names
/// acknowledged before it began. `cargo test -p myriad-sim --test seeds -- --ignored`.
#[test]
#[ignore = "open bug: a listing misses acknowledged names (docs/simulation.md, seed 9107)"]
fn open_seed_9107_listing_sees_every_name() {
    check(&busy(9107));
}
