//! The order between a directory's parent part and its own parts (`After`).

use myriad_proto::requests::Create;
use myriad_proto::{Caller, ClientRequest, LeaseKey, PartitionId, SetAttr};

use super::{Journal, Op, Taken};

fn me() -> Caller {
    Caller {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    }
}

fn key(dir: &str, partition: u32) -> LeaseKey {
    LeaseKey {
        partition: PartitionId(partition),
        dir: dir.into(),
    }
}

fn create(path: &str) -> Op {
    Op::new(
        &me(),
        None,
        ClientRequest::Create(Create {
            path: path.into(),
            mode: 0o644,
            exclusive: true,
            data: Vec::new(),
            durable: false,
            ino: None,
            data_at: None,
            then: None,
        }),
    )
}

fn times_of(path: &str) -> Op {
    let set = SetAttr {
        mtime_ns: Some(5),
        ..SetAttr::default()
    };
    Op::new(
        &me(),
        None,
        ClientRequest::SetAttr {
            path: path.into(),
            set,
        },
    )
    .of_directory()
}

/// The paths of the batch `key`'s sender would take now (`None`: blocked or empty).
fn take(j: &Journal, key: &LeaseKey) -> Option<Vec<String>> {
    match j.take_batch(key) {
        Taken::Batch(_, ops) => Some(ops.into_iter().map(|o| o.path).collect()),
        Taken::Blocked | Taken::Empty => None,
    }
}

#[test]
fn a_directory_s_setattr_goes_after_its_creates_and_before_the_next() {
    let j = Journal::default();
    let (parent, own) = (key("/", 1), key("/d", 2));
    let _ = j.push(&own, create("/d/a"));
    let _ = j.push(&parent, times_of("/d"));
    let _ = j.push(&own, create("/d/b"));
    // The setattr waits for /d/a; /d/b waits for the setattr.
    assert!(matches!(j.take_batch(&parent), Taken::Blocked));
    assert_eq!(take(&j, &own), Some(vec!["/d/a".to_string()]));
    assert!(
        matches!(j.take_batch(&parent), Taken::Blocked),
        "/d/a is in flight, not answered"
    );
    j.done_n(&own, 1);
    assert!(
        matches!(j.take_batch(&own), Taken::Blocked),
        "/d/b goes after the setattr"
    );
    assert_eq!(take(&j, &parent), Some(vec!["/d".to_string()]));
    assert!(matches!(j.take_batch(&own), Taken::Blocked));
    j.done_n(&parent, 1);
    assert_eq!(take(&j, &own), Some(vec!["/d/b".to_string()]));
    j.done_n(&own, 1);
    assert!(matches!(j.take_batch(&own), Taken::Empty));
    // Answered: later changes in /d wait for nothing.
    let _ = j.push(&own, create("/d/c"));
    assert_eq!(take(&j, &own), Some(vec!["/d/c".to_string()]));
}

#[test]
fn a_directory_s_setattr_with_nothing_journaled_in_it_waits_for_nothing() {
    let j = Journal::default();
    let (parent, other) = (key("/", 1), key("/e", 3));
    let _ = j.push(&other, create("/e/x"));
    let _ = j.push(&parent, times_of("/d"));
    assert_eq!(take(&j, &parent), Some(vec!["/d".to_string()]));
    assert_eq!(take(&j, &other), Some(vec!["/e/x".to_string()]));
}

#[test]
fn nothing_journaled_after_a_directory_s_setattr_folds_into_what_went_before() {
    let j = Journal::default();
    let (parent, own) = (key("/", 1), key("/d", 2));
    let write = |offset: u64| {
        Op::new(
            &me(),
            None,
            ClientRequest::Write(myriad_proto::requests::Write {
                path: "/d/a".into(),
                ino: myriad_proto::InodeId(0),
                offset,
                data: vec![1],
                opened: true,
            }),
        )
    };
    let _ = j.push(&own, write(0));
    let _ = j.push(&parent, times_of("/d"));
    let _ = j.push(&own, write(1));
    assert_eq!(
        take(&j, &own),
        Some(vec!["/d/a".to_string()]),
        "the second write is a change of its own, after the setattr"
    );
    j.done_n(&own, 1);
    assert!(matches!(j.take_batch(&own), Taken::Blocked));
}

#[test]
fn a_directory_with_its_setattr_unanswered_names_the_part_to_wait_for() {
    let j = Journal::default();
    let (parent, own) = (key("/", 1), key("/d", 2));
    assert!(j.fenced(["/d"].into_iter()).is_empty());
    let _ = j.push(&parent, times_of("/d"));
    assert_eq!(j.fenced(["/d/x", "/d"].into_iter()), vec![parent.clone()]);
    assert!(j.fenced(["/e"].into_iter()).is_empty(), "another directory");
    assert_eq!(take(&j, &parent), Some(vec!["/d".to_string()]));
    assert_eq!(
        j.fenced(["/d"].into_iter()),
        vec![parent.clone()],
        "in flight"
    );
    j.done_n(&parent, 1);
    assert!(j.fenced(["/d"].into_iter()).is_empty(), "answered");
    let _ = j.push(&own, create("/d/a"));
    assert_eq!(take(&j, &own), Some(vec!["/d/a".to_string()]));
}

#[test]
fn the_parts_a_directory_s_setattr_waits_for_stop_lingering() {
    let j = Journal::default();
    let (parent, own, other) = (key("/", 1), key("/d", 2), key("/e", 3));
    let _ = j.push(&own, create("/d/a"));
    let _ = j.push(&other, create("/e/a"));
    assert!(!j.take_hurry(&own), "nothing waits for /d yet");
    let _ = j.push(&parent, times_of("/d"));
    assert!(j.take_hurry(&own), "the setattr of /d waits for it");
    assert!(!j.take_hurry(&own), "asked once");
    assert!(!j.take_hurry(&other));
}

/// `op` as answered at `t`.
fn at(mut op: Op, t: i64) -> Op {
    op.at_ns = t;
    op
}

/// A one-byte write of `/d/a` at `offset`, answered at `t`.
fn write(offset: u64, t: i64) -> Op {
    let w = myriad_proto::requests::Write {
        path: "/d/a".into(),
        ino: myriad_proto::InodeId(0),
        offset,
        data: vec![1],
        opened: true,
    };
    at(Op::new(&me(), None, ClientRequest::Write(w)), t)
}

/// A write folded into a create leaves the create's time (its directory's) and carries
/// its own as the file's (`Create::data_at`); writes folded into a write move its time.
#[test]
fn a_write_folded_into_a_create_keeps_the_create_s_time_and_carries_its_own() {
    let j = Journal::default();
    let own = key("/d", 2);
    let _ = j.push(&own, at(create("/d/a"), 10));
    let _ = j.push(&own, write(0, 20));
    let _ = j.push(&own, write(1, 30));
    let Taken::Batch(_, ops) = j.take_batch(&own) else {
        panic!("a batch to take");
    };
    assert_eq!(ops.len(), 1, "one change");
    assert_eq!(ops[0].at_ns, 10, "the create's time, its directory's");
    match &ops[0].request {
        ClientRequest::Create(c) => {
            assert_eq!((c.data.len(), c.data_at), (2, Some(30)), "the last write's");
        }
        other => panic!("{other:?}"),
    }
}

/// A file's setattrs answered behind after its create fold into it once every server
/// takes that (`Create::then`: `tar -x` makes one change of its create, write and times),
/// each with its own time; a write after them does not (it would move the times they
/// set), and with an older floor nothing folds.
#[test]
fn a_file_s_setattrs_fold_into_its_create_once_every_server_takes_it() {
    let own = key("/d", 2);
    let set = |set: SetAttr, t: i64, floor: u16| {
        let op = Op::new(
            &me(),
            None,
            ClientRequest::SetAttr {
                path: "/d/a".into(),
                set,
            },
        );
        at(op.into_create_from(floor), t)
    };
    let times = SetAttr {
        mtime_ns: Some(5),
        ..SetAttr::default()
    };
    let mode = SetAttr {
        mode: Some(0o600),
        ..SetAttr::default()
    };
    let new = myriad_proto::SETATTR_IN_CREATE_SINCE;
    let j = Journal::default();
    let _ = j.push(&own, at(create("/d/a"), 10));
    let _ = j.push(&own, write(0, 20));
    let _ = j.push(&own, set(times.clone(), 30, new));
    let _ = j.push(&own, set(mode.clone(), 40, new));
    let _ = j.push(&own, write(1, 50));
    let Taken::Batch(_, ops) = j.take_batch(&own) else {
        panic!("a batch to take");
    };
    assert_eq!(ops.len(), 2, "the create with its setattrs, then the write");
    assert_eq!(j.folded_setattrs(), 2);
    match &ops[0].request {
        ClientRequest::Create(c) => {
            assert_eq!((c.data.len(), c.data_at, ops[0].at_ns), (1, Some(20), 10));
            let then = c
                .then
                .as_ref()
                .map(|t| (t.set.mode, t.set.mtime_ns, t.at_ns));
            assert_eq!(then, Some((Some(0o600), Some(5), 40)));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(ops[1].request, ClientRequest::Write(_)));
    // Below the floor: three changes.
    let j = Journal::default();
    let _ = j.push(&own, at(create("/d/a"), 10));
    let _ = j.push(&own, set(times, 30, new - 1));
    let _ = j.push(&own, set(mode, 40, new - 1));
    let Taken::Batch(_, ops) = j.take_batch(&own) else {
        panic!("a batch to take");
    };
    assert_eq!(ops.len(), 2, "the create, then the two setattrs as one");
    assert_eq!(j.folded_setattrs(), 0);
}

/// A mkdir answered behind fences its directory until the mkdir itself is answered: a
/// later change of the same batch answered first (the mkdir sent again after a refusal
/// for now) does not let the directory's own changes go before it.
#[test]
fn a_new_directory_s_changes_wait_for_its_mkdir_not_for_its_batch_neighbours() {
    let j = Journal::default();
    let (parent, own) = (key("/", 1), key("/d", 2));
    let mkdir = Op::new(
        &me(),
        None,
        ClientRequest::MkdirNumbered {
            path: "/d".into(),
            mode: 0o755,
            ino: myriad_proto::InodeId(9),
        },
    )
    .of_directory();
    let _ = j.push(&parent, mkdir);
    let _ = j.push(&parent, create("/f"));
    let _ = j.push(&own, create("/d/a"));
    let Taken::Batch(_, batch) = j.take_batch(&parent) else {
        panic!("the parent's batch")
    };
    assert_eq!(batch.len(), 2);
    assert!(
        matches!(j.take_batch(&own), Taken::Blocked),
        "after the mkdir"
    );
    j.done(&parent, &[&batch[1]]);
    assert!(
        matches!(j.take_batch(&own), Taken::Blocked),
        "the create answered, the mkdir sent again: /d/a still waits"
    );
    j.done(&parent, &[&batch[0]]);
    assert_eq!(take(&j, &own), Some(vec!["/d/a".to_string()]));
}

fn mkdir(path: &str, ino: u64) -> Op {
    Op::new(
        &me(),
        None,
        ClientRequest::MkdirNumbered {
            path: path.into(),
            mode: 0o755,
            ino: myriad_proto::InodeId(ino),
        },
    )
    .of_directory()
}

/// `tar -x` sets a directory's times once it filled it: that setattr waits for the
/// directory's own changes, and the next directory's mkdir (and so its whole subtree)
/// does not wait behind it; a later setattr of the waiting setattr's name waits with it,
/// and an rmdir (which moves the parent's times) is never passed.
#[test]
fn a_directory_s_setattr_waiting_for_its_changes_is_passed_by_other_names_only() {
    let j = Journal::default();
    let (parent, a, b) = (key("/", 1), key("/a", 2), key("/b", 3));
    let _ = j.push(&parent, mkdir("/a", 9));
    let Taken::Batch(_, first) = j.take_batch(&parent) else {
        panic!("the mkdir of /a")
    };
    j.done(&parent, &[&first[0]]);
    let _ = j.push(&a, create("/a/f"));
    let _ = j.push(&parent, times_of("/a"));
    let _ = j.push(&parent, mkdir("/b", 10));
    let _ = j.push(&parent, times_of("/a"));
    let _ = j.push(&parent, create("/g"));
    let _ = j.push(&b, create("/b/f"));
    assert_eq!(
        take(&j, &parent),
        Some(vec!["/b".to_string(), "/g".to_string()]),
        "the setattrs of /a wait for /a/f"
    );
    assert!(
        matches!(j.take_batch(&b), Taken::Blocked),
        "/b/f waits for the mkdir of /b"
    );
    let flying: Vec<u64> = j.lock().parts[&parent]
        .flight_seqs
        .iter()
        .copied()
        .collect();
    assert_eq!(flying.len(), 2);
    let answered = mkdir("/b", 10);
    j.done(
        &parent,
        &[&Op {
            seq: flying[0],
            ..answered
        }],
    );
    assert_eq!(
        take(&j, &b),
        Some(vec!["/b/f".to_string()]),
        "the mkdir of /b answered: /b's changes go though the setattr of /a still waits"
    );
    j.done_n(&parent, 1);
    assert_eq!(take(&j, &a), Some(vec!["/a/f".to_string()]));
    assert!(matches!(j.take_batch(&parent), Taken::Blocked));
    j.done_n(&a, 1);
    assert_eq!(
        take(&j, &parent),
        Some(vec!["/a".to_string(), "/a".to_string()]),
        "the two setattrs, in order"
    );

    // An rmdir waiting for its directory's unlinks is passed by nothing.
    let j = Journal::default();
    let _ = j.push(&a, create("/a/f"));
    let rmdir = Op::new(&me(), None, ClientRequest::Rmdir { path: "/a".into() }).of_directory();
    let _ = j.push(&parent, rmdir);
    let _ = j.push(&parent, create("/g"));
    assert!(matches!(j.take_batch(&parent), Taken::Blocked));
}

/// A passed setattr's name removed after it (`rm -rf` right after `tar -x`): the rmdir
/// moves the parent's times, so nothing journaled after it goes before it (the parent's
/// mtime would be set back to the rmdir's time when it is sent last).
#[test]
fn a_change_of_a_passed_name_that_moves_the_parent_s_times_is_not_passed() {
    let j = Journal::default();
    let (parent, a) = (key("/", 1), key("/a", 2));
    let _ = j.push(&a, create("/a/f"));
    let _ = j.push(&parent, times_of("/a"));
    let _ = j.push(&parent, times_of("/a"));
    let rmdir = Op::new(&me(), None, ClientRequest::Rmdir { path: "/a".into() }).of_directory();
    let _ = j.push(&parent, rmdir);
    let _ = j.push(&parent, create("/g"));
    assert!(
        matches!(j.take_batch(&parent), Taken::Blocked),
        "the create of /g stays behind the rmdir of /a"
    );
    assert_eq!(take(&j, &a), Some(vec!["/a/f".to_string()]));
    j.done_n(&a, 1);
    assert_eq!(
        take(&j, &parent),
        Some(vec![
            "/a".to_string(),
            "/a".to_string(),
            "/a".to_string(),
            "/g".to_string()
        ])
    );
}

/// A read of a directory's own entry waits only for the changes that move its times
/// (`PartJournal::times_pending`): a create in it, queued or in flight, does; a setattr
/// of a subdirectory waiting for that subdirectory's own changes (`tar -x` sets each
/// directory's times once it filled it) does not, queued or in flight.
#[test]
fn only_changes_that_move_a_directory_s_times_hold_a_read_of_its_entry() {
    let j = Journal::default();
    let (own, sub) = (key("/d", 1), key("/d/s", 2));
    let _ = j.push(&sub, create("/d/s/f"));
    let _ = j.push(&own, times_of("/d/s"));
    let pending = |j: &Journal| {
        j.lock()
            .parts
            .get(&own)
            .map(super::PartJournal::times_pending)
    };
    assert_eq!(
        pending(&j),
        Some(false),
        "a waiting setattr of a subdirectory"
    );
    let _ = j.push(&own, create("/d/g"));
    assert_eq!(pending(&j), Some(true), "a create queued");
    assert_eq!(
        take(&j, &own),
        Some(vec!["/d/g".to_string()]),
        "past the setattr"
    );
    assert_eq!(pending(&j), Some(true), "a create in flight");
    j.done_n(&own, 1);
    assert_eq!(pending(&j), Some(false));
    assert_eq!(take(&j, &sub), Some(vec!["/d/s/f".to_string()]));
    j.done_n(&sub, 1);
    assert_eq!(take(&j, &own), Some(vec!["/d/s".to_string()]));
    assert_eq!(pending(&j), Some(false), "a setattr in flight");
}
