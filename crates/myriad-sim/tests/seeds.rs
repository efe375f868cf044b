//! The simulation in CI: a fixed set of seeds (docs/simulation.md), the regression seeds of
//! the bugs it found, exact replay, and proof that its checks catch a lost write.

use myriad_sim::{SimConfig, run};

fn check(cfg: &SimConfig) -> myriad_sim::Report {
    match run(cfg) {
        Ok(r) => r,
        Err(f) => panic!("{f}"),
    }
}

/// What a test's runs exercised, summed: each feature's test asserts that its feature was
/// used, not only that nothing broke (a run that never took a lease proves nothing about
/// leases).
#[derive(Default)]
struct Totals {
    delivered: std::collections::BTreeMap<&'static str, u64>,
    answered_by_lease: u64,
    answered_by_index: u64,
    tier_overflowed_blocks: u64,
    behind_passes: u64,
    setattrs_in_creates: u64,
}

impl Totals {
    fn check(&mut self, cfg: &SimConfig) -> myriad_sim::Report {
        let r = check(cfg);
        for (op, n) in &r.delivered {
            *self.delivered.entry(op).or_default() += n;
        }
        self.answered_by_lease += r.answered_by_lease;
        self.answered_by_index += r.answered_by_index;
        self.tier_overflowed_blocks += r.tier_overflowed_blocks;
        self.behind_passes += r.behind_passes;
        self.setattrs_in_creates += r.setattrs_in_creates;
        r
    }

    /// Asserts that at least `min` requests named `op` reached a server.
    fn delivered_at_least(&self, op: &str, min: u64) {
        let n = self.delivered.get(op).copied().unwrap_or(0);
        assert!(
            n >= min,
            "only {n} {op} requests delivered (at least {min} expected)"
        );
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
    let (mut ops, mut handovers) = (0, 0);
    for seed in 1..=24 {
        let r = check(&SimConfig::new(seed));
        (ops, handovers) = (ops + r.ops, handovers + r.handovers);
    }
    for seed in 2000..2024 {
        let r = check(&busy(seed));
        (ops, handovers) = (ops + r.ops, handovers + r.handovers);
    }
    assert!(ops >= 50_000, "{ops} operations");
    // Primaries handed back after failovers (issue 24), under the same faults: the seeds
    // must exercise it, not only survive without it.
    assert!(handovers >= 24, "only {handovers} hand-overs in 48 runs");
}

/// Servers joining and leaving while the clients work (copies move to an added server and
/// away from a removed one, with the usual faults).
#[test]
fn seeds_with_moves_keep_every_invariant() {
    let mut moved = 0;
    for seed in 80..86 {
        moved += check(&SimConfig {
            moves: true,
            ..busy(seed)
        })
        .moves_completed;
    }
    assert!(moved >= 6, "only {moved} copies moved in six runs");
}

/// Two clients of three reading through directory leases (docs/fuse.md "Directory leases"),
/// each read done twice so that the second is mostly answered from the lease: no read may
/// be older than a change acknowledged before it began.
#[test]
fn seeds_with_leases_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in 1..=8 {
        t.check(&SimConfig {
            leases: true,
            ..SimConfig::new(seed)
        });
    }
    for seed in 2100..2106 {
        t.check(&SimConfig {
            leases: true,
            ..busy(seed)
        });
    }
    t.check(&SimConfig {
        leases: true,
        moves: true,
        ..busy(86)
    });
    t.delivered_at_least("leased", 100);
    assert!(
        t.answered_by_lease >= 100,
        "{} entries answered from leases",
        t.answered_by_lease
    );
}

/// The leased clients whose changes are answered once applied also write behind
/// (docs/fuse.md "Write-behind"): exclusive leases, creates, writes and unlinks answered
/// at once and sent in batches; reads by the others recall them. No read may be older
/// than a change acknowledged (synced) before it began; nothing acknowledged is lost.
/// Seed 46 (before the check knew a put written behind is two steps, create then write)
/// saw the empty file between them: kept as a check that the model allows it.
/// Seed 7127 with moves: below.
#[test]
fn seeds_with_write_behind_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in (1..=8).chain([46]) {
        t.check(&SimConfig {
            behind: true,
            ..SimConfig::new(seed)
        });
    }
    for seed in 2200..2204 {
        t.check(&SimConfig {
            behind: true,
            ..busy(seed)
        });
    }
    // 7127 (found while building write-behind): a read held at the read gate while its
    // partition moved to another server was then served by the old one, which no longer
    // held the file (NotFound for an acknowledged file); a read that waited at the gate
    // now checks that its server still serves the partition.
    for seed in [87, 7127] {
        t.check(&SimConfig {
            behind: true,
            moves: true,
            ..busy(seed)
        });
    }
    // Found while building rounds (docs/write-path.md "Rounds"): 130055 (a stale read) and
    // 150167 (a diverged copy) when jobs of unrelated requests shared a batch; 80083 (a
    // diverged copy after a catch-up cut short) with a batch's changes served together.
    for seed in [80083, 130055] {
        t.check(&SimConfig {
            behind: true,
            moves: true,
            ops_per_client: 300,
            ..busy(seed)
        });
    }
    t.check(&SimConfig {
        moves: true,
        ..SimConfig::new(150167)
    });
    // 7071 with leases: an unlink answered behind, sent again on its own after its batch
    // met a directory splitting, lost its answer and timed out; the sender dropped it (the
    // next fsync reported the timeout once, the one after said all was durable, the name
    // stayed). A change sent on its own is now tried on, as a batch is.
    t.check(&SimConfig {
        behind: true,
        leases: true,
        clients: 4,
        ops_per_client: 300,
        ..SimConfig::new(7071)
    });
    t.delivered_at_least("leased_exclusive", 20);
    t.delivered_at_least("batch", 20);
}

/// rmdirs answered behind (docs/fuse.md "rmdir behind", stop 78): each client removes its
/// own empty directories, claimed with their parents, and the rmdir goes to the
/// parent's journal after the directory's own. Seeds 130001 and 131008 (with moves, the
/// most rmdirs behind of 16) with faults: no removal acknowledged and then undone, no
/// read older than an acknowledged rmdir. (9 rmdirs go in batches in these two runs.)
#[test]
fn seeds_with_rmdirs_answered_behind_keep_every_invariant() {
    let mut t = Totals::default();
    for (seed, moves) in [(130_001, false), (131_008, true)] {
        t.check(&SimConfig {
            behind: true,
            moves,
            clients: 6,
            ops_per_client: 300,
            ..SimConfig::new(seed)
        });
    }
    t.delivered_at_least("batched_rmdir", 5);
}

/// mkdirs answered behind (docs/fuse.md "mkdir behind", protocol 42): each client makes
/// its directories in a directory it claimed, fills odd ones with a file at once (under
/// the new directory's birth lease), and reads other clients' such files by their whole
/// paths (a partition with no object for the directory asks its entry's partition,
/// which recalls the maker's lease on the parent first); a filled one gets its times
/// set and the next directory made at once, as `tar -x` does (that mkdir may go before
/// the setattr still waiting for the file: docs/fuse.md "A directory's entry from two
/// journals"). With faults: no directory or file acknowledged and then missing, none
/// read older than acknowledged.
#[test]
fn seeds_with_mkdirs_answered_behind_keep_every_invariant() {
    let mut t = Totals::default();
    for (seed, moves) in [(150_000, false), (150_004, false), (150_007, true)] {
        t.check(&SimConfig {
            behind: true,
            leases: true,
            moves,
            clients: 6,
            ops_per_client: 300,
            ..SimConfig::new(seed)
        });
    }
    eprintln!(
        "batched mkdirs {}, dirs sought {}",
        t.delivered.get("batched_mkdir").copied().unwrap_or(0),
        t.delivered.get("dir_sought").copied().unwrap_or(0)
    );
    t.delivered_at_least("batched_mkdir", 5);
    t.delivered_at_least("dir_sought", 1);
    // A directory filled, given its times and followed by the next one's mkdir
    // (`mkdir_filled`): at least once that mkdir went before the waiting setattr.
    assert!(t.behind_passes >= 1, "no batch passed a waiting setattr");
    // The file's times set at once after it was written: inside its create.
    assert!(
        t.setattrs_in_creates >= 1,
        "no setattr went inside a create"
    );
}

/// Every client also takes, renews and gives back write locks on three shared inodes
/// (docs/fuse.md "File locks between mounts"): no two may believe they hold one at once.
/// Seeds 83 and 1016 (5 clients) fail when a new primary opens without the grace that
/// lets holders reclaim their locks first (checked by removing it). Seed 1266 (4 clients
/// of 400 operations) found a client that had not renewed its lock for a whole lease
/// (its primary failed over twice meanwhile, and the primary in between granted the
/// lock to another client after its grace) reclaim it from the next primary, in its
/// grace: two holders.
#[test]
fn seeds_with_locks_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in (1..=8).chain([83]) {
        t.check(&SimConfig {
            locks: true,
            ..SimConfig::new(seed)
        });
    }
    t.check(&SimConfig {
        locks: true,
        clients: 5,
        ..SimConfig::new(1016)
    });
    t.check(&SimConfig {
        locks: true,
        leases: true,
        ..busy(2110)
    });
    t.check(&SimConfig {
        locks: true,
        clients: 4,
        ops_per_client: 400,
        split_entries: 16,
        ..SimConfig::new(1266)
    });
    t.delivered_at_least("lock", 500);
}

/// Every client also moves a small tree back and forth over an empty directory while
/// every client reads it (ARCHITECTURE.md "Directory rename"): the target is a directory
/// throughout, the moved file under exactly one name. Seed 1671 found a coordinator that
/// acknowledged a rename whose old directory object it had failed to drop (a lost
/// DirFinish): the old tree stayed readable after the acknowledgement. Seeds 5007 and 116
/// (with write-behind) found a mkdir of a moved directory's old name answered
/// `AlreadyExists` while its old object lingered, frozen, before its rename finished.
/// Seeds 2491 and 5694 found anti-entropy comparing (and "repairing") a copy of another
/// history at the same batch number, which the stream was about to replace whole. Seeds
/// 71001 and 72033 (with --freeze --moves) found the retry of a directory rename whose
/// coordinator died after the decision answered "ok" from the recorded outcome while
/// recovery had not yet dropped the old directory objects: the file was read under its
/// old name after the acknowledgement.
#[test]
fn seeds_with_directory_moves_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in (1..=12).chain([1671, 2491, 5007, 5694, 71001]) {
        t.check(&SimConfig {
            dir_moves: true,
            ..SimConfig::new(seed)
        });
    }
    t.check(&SimConfig {
        dir_moves: true,
        behind: true,
        ..SimConfig::new(116)
    });
    t.check(&SimConfig {
        dir_moves: true,
        moves: true,
        ..busy(2120)
    });
    // Directory objects moved between partitions by renames (ARCHITECTURE.md).
    t.delivered_at_least("dir_export", 20);
}

/// Chunks are coded 0.5 s after their last write (docs/redundancy.md) in every run with 4
/// servers or more. With servers leaving (5 servers, 4 clients) these seeds lost coded
/// chunks: fragments of servers that left were never made again (10, 27); servers left
/// one after another before their fragments were rebuilt (1027, 1079); a new coding of a
/// chunk overwrote the fragment with the same index of the coding in use on the same
/// server, and dropped it when it failed (1033, 1055). A leaving server now stays in the
/// map until it keeps no fragment, and fragments are keyed by their generation.
#[test]
fn seeds_with_coded_chunks_and_servers_leaving_keep_every_invariant() {
    let mut t = Totals::default();
    let five = |seed| SimConfig {
        servers: 5,
        clients: 4,
        moves: true,
        ..SimConfig::new(seed)
    };
    t.check(&five(10));
    t.check(&five(1027));
    t.check(&SimConfig {
        dir_moves: true,
        ..five(27)
    });
    t.check(&SimConfig {
        dir_moves: true,
        ..five(1079)
    });
    t.check(&SimConfig {
        freeze: true,
        ..five(1055)
    });
    t.check(&SimConfig {
        behind: true,
        ..five(1033)
    });
    t.delivered_at_least("put_fragments", 100);
}

/// Every client also freezes a small tree of its own and thaws it again while it writes
/// into it and every client reads it (docs/metadata-index.md): no write is acknowledged
/// while the tree is known frozen, none refused once it is known thawed, and a refused one
/// is never read. With faults, with copies moving, with write-behind.
#[test]
fn seeds_with_frozen_trees_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in 1..=10 {
        t.check(&SimConfig {
            freeze: true,
            ..SimConfig::new(seed)
        });
    }
    t.check(&SimConfig {
        freeze: true,
        behind: true,
        ..SimConfig::new(11)
    });
    t.check(&SimConfig {
        freeze: true,
        moves: true,
        ..busy(2130)
    });
    t.check(&SimConfig {
        freeze: true,
        dir_moves: true,
        moves: true,
        ..SimConfig::new(72033)
    });
    t.delivered_at_least("mark_read_only", 50);
}

/// The trees are frozen by building their metadata index and thawed by dropping it, and
/// the leased clients answer from indexes (docs/metadata-index.md, I1): no read answered
/// from an index may be older than a change acknowledged before it began. Seeds that
/// failed while building it: 3 (a build whose registration was in doubt thawed its tree
/// with the registry still listing it: now unlisted first, else left frozen), 184 (two
/// clients' read-change-rename of one registry file lost one's drop: now one registry
/// file per index, created and unlinked), 21 (a client kept answering from the registry
/// it had read before its own drop: its own change recalls none of its leases, so it
/// forgets what it read), 3006 (5 clients, moves: the lost drop).
#[test]
fn seeds_with_indexes_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in (1..=8).chain([3, 21, 184]) {
        t.check(&SimConfig {
            indexes: true,
            ..SimConfig::new(seed)
        });
    }
    t.check(&SimConfig {
        indexes: true,
        moves: true,
        clients: 5,
        ops_per_client: 300,
        ..SimConfig::new(3006)
    });
    assert!(
        t.answered_by_index >= 20,
        "{} entries answered from indexes",
        t.answered_by_index
    );
}

/// The trees get automatic indexes (docs/metadata-index.md "Automatic indexes"): never
/// frozen, every write into them taken, and a read answered from an index must still be
/// as fresh as any (the write unregistered the index first). Seed that failed while
/// building it: 360 (a build whose rename to the live entry timed out took its marks
/// off as abandoned while the rename had landed: a registered index over a tree whose
/// changes no longer unregistered it; now a failed build unlinks its pending entry, then
/// its live one, and takes the marks off only after both).
#[test]
fn seeds_with_automatic_indexes_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in (1..=6).chain([360]) {
        t.check(&SimConfig {
            indexes: true,
            auto_indexes: true,
            ..SimConfig::new(seed)
        });
    }
    t.check(&SimConfig {
        indexes: true,
        auto_indexes: true,
        moves: true,
        clients: 5,
        ops_per_client: 300,
        ..SimConfig::new(3006)
    });
    assert!(
        t.answered_by_index > 0,
        "no entry answered from an automatic index"
    );
    // Writes into an indexed tree unregistered its index first.
    t.delivered_at_least("unregister_index", 20);
}

/// Every server keeps a fast and a capacity tier (docs/redundancy.md "Tiers"), each on a
/// disk that crashes on its own; fast tiers overflow and move blocks back at random. With
/// 5 servers chunks are also erasure coded (fragments live in the capacity tier).
#[test]
fn seeds_with_tiers_keep_every_invariant() {
    let mut t = Totals::default();
    for seed in 1..=4 {
        t.check(&SimConfig {
            tiers: true,
            ..SimConfig::new(seed)
        });
    }
    for seed in [101, 102] {
        t.check(&SimConfig {
            tiers: true,
            servers: 5,
            moves: true,
            ..SimConfig::new(seed)
        });
    }
    assert!(
        t.tier_overflowed_blocks >= 100,
        "only {} blocks overflowed to a capacity tier",
        t.tier_overflowed_blocks
    );
}

/// Servers in two zones, `/c1` and `/x2` pinned one to each (docs/zones.md): their trees
/// are placed by partition groups of their own, whose copies must stay in their zone
/// through failovers and (with moves) servers joining and leaving; every map is checked.
/// Seeds that failed while building it: 1027 (a pinned partition of two copies: a copy
/// back from down but not caught up was promoted when its partner died, and a write
/// acknowledged meanwhile was lost; now such a copy is behind, never promoted, until the
/// leader sees it caught up: `PartitionInfo::behind`), 2001 (a server whose pinned copies
/// had nowhere to go in its zone was told to leave and never could; now `mark_leaving`
/// refuses). The clients are in the zones too and read entries from copies there under
/// loans of reads (docs/zones.md "Nearest copy"): seed 18 with 500 operations per client
/// reads a stale version from a copy when the copy answers without a loan (a client
/// with an old map reads from a deposed primary, now a copy lacking the new primary's
/// writes).
#[test]
fn seeds_with_zones_keep_every_invariant() {
    let mut t = Totals::default();
    t.check(&SimConfig {
        zones: true,
        ops_per_client: 500,
        ..SimConfig::new(18)
    });
    for seed in (1..=4).chain([1027]) {
        t.check(&SimConfig {
            zones: true,
            ..SimConfig::new(seed)
        });
    }
    for seed in [201, 202, 2001] {
        t.check(&SimConfig {
            zones: true,
            servers: 5,
            moves: true,
            ..SimConfig::new(seed)
        });
    }
    // Reads answered by copies in the client's zone, under loans from their primaries.
    t.delivered_at_least("lend_reads", 10);
}

/// Trees pinned and unpinned while the clients use them (docs/zones.md section 3): their
/// partitions copy them, propose the decisions, finish or undo after crashes. Seed 9
/// found recovery taking a settled move whose tree was leaving again for undecided (it
/// "undid" it towards the new target and left the tree frozen: the final reads got
/// `Busy`); fixed in `tree_move::outcome`, with its unit test. Seed 34 (--leases, and 22
/// with --behind, not run here): an rmdir met the drop of its directory's old object
/// after the decision and answered `NotFound` for a directory that lived on in its new
/// place; fixed in `Partition::moved_away` (the newer map instead). 300 operations per
/// client each: fewer miss both.
#[test]
fn seeds_with_tree_moves_keep_every_invariant() {
    for (seed, leases) in [(9, false), (34, true)] {
        let r = check(&SimConfig {
            zones: true,
            tree_moves: true,
            leases,
            ops_per_client: 300,
            ..SimConfig::new(seed)
        });
        assert!(r.tree_moves_settled > 0, "seed {seed}: no tree moved");
    }
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
/// 9107: a restarted server opened its partitions under its old map while newer maps came,
///       kept one running while another server was its primary, then became the primary
///       again and served (and reset its backups to) its stale copy: a listing missed three
///       acknowledged names. Fix: primary terms (a partition serves only through maps that
///       directly follow each other and keep it primary).
/// 9005: a backup had parked a deposed primary's batches; the new primary's next batch let
///       them in and its own were acknowledged as resends: an acknowledged write lost. Fix:
///       batches carry their chain; a copy applies and acknowledges only batches of its
///       own history.
/// 9027: a deposed primary's split task undid a split that recovery had undone and a new
///       primary had redone: `/big` answered `WrongShard` for good. Fix: a deposed
///       partition calls no other partition; a partition's request from a server that is
///       not its primary is refused.
/// 3049 (found with exchanges in the workload): an exchange between two partitions
///       committed on a primary that was then cut off before it answered; the client's
///       retry on the new primary found no recorded outcome and swapped the names back,
///       answering "done". Fix: a rename between partitions records its outcome in the
///       batch of its decision.
/// 3133 (found once orphans were swept in the background): a primary cut off from the
///       others committed a sweep's batch after its serving lease had ended; its copies
///       forked at the same batch number and anti-entropy had to repair them. Fix:
///       background work that commits (orphan sweeps, forgetting outcomes, anti-entropy)
///       checks first that the partition is still served here (`Env::serves`). Why the
///       stream did not catch the fork by its hash chain is not understood yet.
/// 20090 (5 servers, 8 clients): recovery rolled forward a mkdir that had completed and been
///       undone by an rmdir since recovery listed it, leaving an orphan directory object
///       that made the next mkdir of the name fail. Fix: recovery claims an intent, then
///       reads it again.
#[test]
fn regression_seeds_pass() {
    for seed in [
        1008, 1016, 1031, 3001, 3049, 3059, 5052, 9005, 9027, 9107, 9941,
    ] {
        check(&busy(seed));
    }
    check(&SimConfig {
        servers: 5,
        clients: 8,
        ops_per_client: 300,
        split_entries: 8,
        ..SimConfig::new(20090)
    });
    // 172 with directory moves and moves: a write acknowledged on its primary's disk
    // alone (one copy down, the other still joining) was lost when the primary was cut
    // off and the joining copy was promoted. Fix: with no member copy, a write waits for
    // a joining one (`Replicator::wait`).
    check(&SimConfig {
        dir_moves: true,
        moves: true,
        ..SimConfig::new(172)
    });
    // 5211 (4 clients of 300 operations): an exchange's commit message to its destination
    // was lost; a second exchange brought the file it took away back there before
    // recovery resolved the first, whose commit then dropped the file's first chunk (read
    // as zeros). Fix: a file an unresolved exchange is taking away from a partition does
    // not come back there before it resolves (`leaving_here`: `Busy`, retried).
    check(&SimConfig {
        clients: 4,
        ops_per_client: 300,
        ..SimConfig::new(5211)
    });
    // 60151: a primary caught up from a copy with more batches of an older term and lost
    // an acknowledged write. Fix: copies are ordered by (term, batch).
    check(&SimConfig {
        servers: 3,
        ops_per_client: 600,
        ..busy(60151)
    });
    // 80090: a deposed coordinator's task resent a rename's prepare after the rename was
    // aborted; the staged entry stayed pending for good. Fix: calls check before every
    // attempt that their partition is still served; aborts leave a tombstone.
    check(&SimConfig {
        moves: true,
        ..busy(80090)
    });
    // 2355 with leases (found at commit 4ee1112, before leased clients read twice): the
    // start-up recovery pass listed a rename's intent between its apply and its owner's
    // claim and aborted the target while the coordinator committed: the client was told
    // "done", the source was gone, the target kept the old file. Fix: `Partition::begin`
    // claims the txid with `try_hold` and steps back (`Busy`) if recovery has it. The
    // workload changed since; the seed is kept as it runs now.
    check(&SimConfig {
        leases: true,
        ..SimConfig::new(2355)
    });
    // 31142 with leases and moves (found while building whole listings): a listing left
    // out a name a cross-partition rename was still installing, though its client had
    // been told "done", and the listing's lease answered the name missing. Fix: a page
    // says when it left entries out (`DirPage::hidden`), and is then not whole.
    check(&SimConfig {
        leases: true,
        moves: true,
        ..SimConfig::new(31142)
    });
    // 110007: a dropped copy cut short by a crash kept its seq over part of its keys and was
    // later found up to date. Fix: the drop marks the copy incomplete first. The seed's
    // schedule changed before the fix (it passes without it); the reproduction is
    // `replication::copy::tests::a_drop_cut_short_leaves_no_seq_over_missing_keys`.
    check(&SimConfig {
        moves: true,
        ..busy(110007)
    });
    // 40060 with locks and directory moves (issue 49, changes held and resent): a create
    // over an existing file that recorded nothing was answered `Applied`, held, resent
    // after its own unlink and brought the file back. Fix: only a change whose outcome is
    // recorded is answered `Applied`.
    check(&SimConfig {
        locks: true,
        dir_moves: true,
        ..SimConfig::new(40060)
    });
    // 50259 with moves, and write-behind seed 87: a resent create brought back a file its
    // own client had removed since (the removal survived; a move had carried the file but
    // not the create's record). Fix: a resend is refused where a later change of its
    // client is recorded or noted (`serve_resend`, `ResendGuard`). 50056 with tree moves
    // (a read of an older version after a newer one was acknowledged) passed with it.
    check(&SimConfig {
        moves: true,
        ..SimConfig::new(50259)
    });
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        ..SimConfig::new(50056)
    });
    // 300 (and 12, 2000 of the CI sets, once the workload checked mkdir and rmdir
    // answers): an rmdir finished by recovery was retried into `NotFound`. Fixes: the
    // outcome is recorded with the intent's resolution, whoever resolves it; recovery
    // holds the change's place while it resolves, so a retry waits and finds the outcome
    // (300: the retry looked for it just before recovery recorded it).
    check(&SimConfig::new(300));
    // 664 with zones and tree moves: a writer answered once applied read its file back
    // from a copy in its zone that did not have the change yet. Fix: a client keeping
    // changes of a partition reads it from its primary (`nearest.rs`).
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        ..SimConfig::new(664)
    });
    // 66 with zones and tree moves: changes a mount held until durable were sent again
    // after their primary changed, but a tree move had taken their names to another
    // partition meanwhile, which held no record of them: a rename ran twice and one
    // file's bytes were read under another name. Fix: a change is first asked after at
    // the partitions its earlier tries went to (`Envelope::Recorded`,
    // `client/tries.rs`); it fails if their answers are ignored. (118 and 1137, a retried
    // rmdir answering `NotFound` and a mkdir `AlreadyExists`, run otherwise since.)
    // Since a mkdir's touch overlaps its last step (stop 76), seed 66 no longer sends a
    // change again after a failover; 67 does, five times: the path must be taken.
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        ..SimConfig::new(66)
    });
    let r = check(&SimConfig {
        zones: true,
        tree_moves: true,
        ..SimConfig::new(67)
    });
    let asked = r.delivered.get("recorded").copied().unwrap_or(0);
    assert!(
        asked > 0,
        "seed 67 asked no partition for a recorded outcome"
    );
    // 1161 likewise: a mkdir answered, its answer lost, retried after the tree moved,
    // answered `AlreadyExists` with the earlier partition's answer ignored.
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        ..SimConfig::new(1161)
    });
    // 220 with zones and tree moves: a mkdir of a tree's root went through between the
    // tree move's look (no root: nothing to copy) and its decision, leaving the directory
    // in the placement the tree left; a file made in it was not found by a reader placing
    // the tree where it went. Fix: the mkdir is undone (`Busy`) unless, once its entry is
    // pending, no move of a tree rooted there is under way and the map still places its
    // object where it was made (`Partition::placed_for_good`).
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        ..SimConfig::new(220)
    });
    // 60141 with locks and directory moves: a renewal answered 10 s after it was sent,
    // by a new lock table, led to a reclaim of a lock whose lease had lapsed at the old
    // table meanwhile (two other clients had held it since): two holders at once. Fix:
    // locks are reclaimed only while their lease, judged when the answer comes, lasts.
    check(&SimConfig {
        locks: true,
        dir_moves: true,
        ..SimConfig::new(60141)
    });
    // 60158 with tree moves, 8 clients of 400 operations: a move's undo thawed /c7, then
    // failed (a server down) before its child /c7/d2; an rmdir removed the still frozen
    // child, so the next undo's walk of the originals missed its copy, which stayed
    // hidden where the tree was headed and answered every later mkdir of the name `Busy`.
    // Fixes: a frozen directory object is not removed (`Busy`, the rmdir tried again),
    // and undos go deepest first (`undo_copies`).
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        clients: 8,
        ops_per_client: 400,
        ..SimConfig::new(60158)
    });
    // 80011 with write-behind and tree moves, 6 clients: an unlink answered behind was
    // refused when applied (its partition short of copies, `Unavailable`); the next sync
    // reported that error once, as it came, which read as "try again": the sync retried
    // succeeded, and the unlink was taken for done while the file stayed. Fix: a change
    // answered behind and refused is reported as lost (`Io`) by `sync_changes`, and kept
    // as `Io` for a file's fsync when the refusal was a "try again" one.
    check(&SimConfig {
        zones: true,
        tree_moves: true,
        behind: true,
        clients: 6,
        ops_per_client: 300,
        ..SimConfig::new(80011)
    });
    // 93019 with splits of 16 names, moves, tiers and tree moves, 4 servers: a split's
    // child copy was dropped by the split's undo while an unlink of a name in it was being
    // served there (its shard checked before the drop); the unlink answered `NotFound` for
    // a name that lived on at the split's source. Fix: a `NotFound` for an entry whose
    // shard left the partition meanwhile sends the client to the directory's home
    // (`Partition::shard_gone`).
    check(&SimConfig {
        servers: 4,
        split_entries: 16,
        moves: true,
        tiers: true,
        zones: true,
        tree_moves: true,
        clients: 6,
        ops_per_client: 300,
        ..SimConfig::new(93019)
    });
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
                // A read of a lost write, or the copies of a partition that no longer
                // agree (the disk lost writes on one of them), seen at the end or by an
                // anti-entropy round that had to repair them.
                assert!(
                    f.what.contains("acknowledged")
                        || f.what.contains("stale")
                        || f.what.contains("copies differ")
                        || f.what.contains("copies diverged"),
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

/// Quotas on `/`, `/big` and `/c0` (docs/quotas.md): at the end every primary counts the
/// map's quotas, and its usage of each equals a count from scratch of what it holds,
/// through failovers, directory splits, moves of copies, write-behind batches and trees
/// moving between zones.
#[test]
fn seeds_with_quotas_keep_their_usage_exact() {
    for seed in 3000..3004 {
        check(&SimConfig {
            quotas: true,
            ..busy(seed)
        });
    }
    check(&SimConfig {
        quotas: true,
        moves: true,
        ..busy(3004)
    });
    check(&SimConfig {
        quotas: true,
        behind: true,
        leases: true,
        ..busy(3005)
    });
    check(&SimConfig {
        quotas: true,
        zones: true,
        tree_moves: true,
        ..busy(3006)
    });
    // Found at stop 81: `/big` held 25 names under a limit of 24 once a split had moved
    // names to a partition whose ledger entry did not cover them (the home now reserves
    // what each partition reports holding, and a partition gives up the allowance of
    // what it moved away).
    check(&SimConfig {
        quotas: true,
        moves: true,
        zones: true,
        tree_moves: true,
        ops_per_client: 300,
        ..busy(60003)
    });
}

/// Found at stop 81 by the thousand seeds with quotas, with the first code of quota
/// enforcement: a client read `/c4/f0` right after `renameat2(/c4/f0, /x4/f4,
/// RENAME_EXCHANGE)` with the file's second chunk but an empty first chunk, while `/x4`
/// was splitting between the two partitions of the exchange. The cause (found at stop 83
/// with seed 3095 and the quota home's recalls made concurrent): the split moved the
/// exchanged file back into the partition the exchange was taking it from, whose commit
/// then dropped its first chunk there; an import now waits for such an exchange
/// (`refuse_entries_leaving_here`, a unit test in `state/mutation/tests.rs`). The seed
/// runs another schedule at the landed code and stays here.
#[test]
fn an_exchange_during_a_split_keeps_the_file_s_first_chunk() {
    check(&SimConfig {
        quotas: true,
        ops_per_client: 300,
        ..busy(40128)
    });
}

/// Found at stop 82 with the quota home's recalls made concurrent (not kept): a create waiting
/// 5 s for allowance (the home's `QuotaReport` to a partition was delayed) timed out at
/// its client, which then removed the name (answered `NotFound`); the create was applied
/// after that and the name came back. A change now waits at most `HELD_UP_MAX` (`made.rs`) for
/// allowance before it is answered `Busy` instead of applied. With the bound the seed runs
/// another schedule; it stays as a seed of that race.
#[test]
fn a_change_long_short_of_allowance_is_not_applied_after_its_client_gave_up() {
    check(&SimConfig {
        quotas: true,
        ops_per_client: 300,
        ..busy(3073)
    });
}

/// Found at stop 86: a second copy of a create (the network sent it twice) waited 5 s
/// behind the first, which was short of allowance and answered `TimedOut`; the copy then
/// ran, got allowance at once and was applied after its client had given up and removed
/// the name (answered `NotFound`): the name came back. A change's time held up now counts
/// from its arrival, the wait behind its own copy included (`Made::arrived`).
#[test]
fn a_copy_of_a_change_that_waited_behind_its_twin_is_not_applied_late() {
    check(&SimConfig {
        quotas: true,
        trash: true,
        behind: true,
        leases: true,
        ops_per_client: 300,
        ..busy(1032)
    });
}

/// Found at stop 86: an unlink answered behind was refused `Unavailable` inside its batch
/// (its partition had fewer copies up than `--min-copies` while a server was stopped), and
/// the mount's sender took that for a refusal for good: the change was dropped, and its
/// client then read the file back. A change of a batch refused for now is sent again on
/// its own, as a busy one was (`send_behind`).
#[test]
fn a_change_answered_behind_and_refused_for_now_is_sent_again() {
    check(&SimConfig {
        quotas: true,
        tree_moves: true,
        zones: true,
        behind: true,
        leases: true,
        ops_per_client: 300,
        ..busy(8007)
    });
}

/// Found at stop 86 (likely from stop 85's keeping of replaced files): the network sent
/// a rename's prepare twice; the second copy, held up choosing the trash's name for the
/// file it replaces, was applied after the rename had committed and staged the name
/// again under the decided transaction: `/c0/f4` answered `Busy` for good. A prepare that
/// finds the moved file already there stages nothing (`already_there`).
#[test]
fn a_late_copy_of_a_rename_s_prepare_stages_nothing() {
    check(&SimConfig {
        quotas: true,
        trash: true,
        ops_per_client: 300,
        ..busy(20038)
    });
}

/// Found at stop 86: with `--quotas --dir-moves --moves`, `/c0` (limited to 10 names)
/// ended with 11: a partition that moved a directory's entries out gave their allowance
/// up where it was, asked again, and its home granted it its old ledger entry while the
/// partitions that received the entries reported them: the invariant "never over"
/// (docs/quotas.md) broken. The home now settles an asker whose entry is past what the
/// others leave free (`entry_past_free`).
#[test]
fn directory_moves_inside_a_limited_quota_keep_it_within_its_limit() {
    check(&SimConfig {
        quotas: true,
        dir_moves: true,
        moves: true,
        ops_per_client: 300,
        ..busy(8005)
    });
}

/// Found at stop 87 (`--locks --zones --tree-moves --behind --leases`): a file numbered by
/// a zone's partition had its locks on that group's ring; the group went with a tree
/// move and came back with another, so the file's locks moved to a partition that had
/// never heard of them, which granted a write lock another client held (and renewed at
/// the old partition). Locks now live on the default group's ring, which no map change
/// alters.
#[test]
fn a_file_s_locks_stay_where_they_are_as_zones_come_and_go() {
    check(&SimConfig {
        locks: true,
        zones: true,
        tree_moves: true,
        behind: true,
        leases: true,
        servers: 4,
        ops_per_client: 300,
        ..busy(111009)
    });
}

/// The trash on (docs/trash.md): every unlink moves its file to `/.trash`; at the end the
/// trash keeps a file for every removal acknowledged and none more than were tried,
/// through failovers, splits, write-behind batches, directory moves and quotas.
#[test]
fn seeds_with_the_trash_keep_every_removed_file() {
    for seed in 3100..3103 {
        check(&SimConfig {
            trash: true,
            ..busy(seed)
        });
    }
    check(&SimConfig {
        trash: true,
        behind: true,
        leases: true,
        ..busy(3103)
    });
    check(&SimConfig {
        trash: true,
        quotas: true,
        dir_moves: true,
        ..busy(3104)
    });
    // Found at stop 83: a mkdir of a trash directory in doubt after a crash left its
    // object, a retried move went into it, and recovery's undo of the mkdir was refused
    // as not empty, forever (the name stayed pending, its files unlisted). A partition
    // now moves files only into trash directories whose mkdir it saw answered.
    check(&SimConfig {
        trash: true,
        ops_per_client: 300,
        ..busy(186)
    });
    // Found at stop 84: a rename over a file waited 5 s on the trash's directories, its
    // client timed out and renamed another file to the rename's source, and the late
    // rename then moved that one over the destination. Making the trash's directories
    // may now take 1 s before the change answers `Busy` instead of applying late. (With
    // that bound on unlinks' moves too, this seed's schedule no longer takes that path:
    // it keeps the configuration covered.)
    check(&SimConfig {
        trash: true,
        dir_moves: true,
        behind: true,
        ops_per_client: 300,
        ..busy(711)
    });
    // Found at stop 84: the authority renewed the lease of a server back from an
    // isolation while it still held its old map; it answered a listing as the primary of
    // a partition it no longer led. Leases now go only to servers on the newest map.
    check(&SimConfig {
        trash: true,
        ops_per_client: 300,
        ..busy(149)
    });
    // Found at stop 85: an unlink answered behind was refused when applied (the move to
    // the trash timed out on a peer), and the same name's second unlink was answered "no
    // such file" from the client's lease, which still showed the first as made; the file
    // was still there. A refused change now drops the lease of its directory.
    check(&SimConfig {
        trash: true,
        dir_moves: true,
        behind: true,
        ops_per_client: 300,
        ..busy(618)
    });
}
