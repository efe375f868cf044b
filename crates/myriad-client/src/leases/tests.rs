use super::*;
use myriad_proto::{ClientRequest, InodeId};

fn grant(dir: &str) -> LeaseGrant {
    LeaseGrant {
        key: LeaseKey {
            partition: PartitionId(2),
            dir: dir.into(),
        },
        valid_ms: 800,
        exclusive: None,
    }
}

fn me() -> Caller {
    Caller::root()
}

fn missing() -> Entry {
    Entry {
        caller: me(),
        cached: Cached::Missing,
    }
}

fn file(nlink: u32) -> Entry {
    let inode = Inode {
        ino: InodeId(5),
        kind: FileKind::File,
        mode: 0o644,
        uid: 0,
        gid: 0,
        size: 0,
        nlink,
        atime_ns: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        symlink_target: None,
        xattrs: Vec::new(),
        link_home: None,
        rdev: 0,
    };
    Entry {
        caller: me(),
        cached: Cached::Found {
            inode,
            data: Vec::new(),
            asked: 0,
        },
    }
}

#[tokio::test(start_paused = true)]
async fn names_are_kept_while_the_lease_lasts_and_not_past_a_drop() {
    let l = Leases::new(1);
    let seen = (Instant::now(), l.generation("/d"));
    assert_eq!(
        l.put("/d", "f", file(1), &grant("/d"), seen, "s1".into()),
        Some(("s1".into(), 1)),
        "the first lease from a server starts its poll"
    );
    assert!(
        l.put("/d", "g", missing(), &grant("/d"), seen, "s1".into())
            .is_none()
    );
    assert!(l.get("/d", "f", &me()).is_some() && l.get("/d", "g", &me()).is_some());
    assert!(
        l.get("/d", "h", &me()).is_none(),
        "a name never read is not known missing"
    );
    // Hard-linked files are never kept.
    assert!(
        l.put("/d", "h", file(2), &grant("/d"), seen, "s1".into())
            .is_none()
    );
    assert!(l.get("/d", "h", &me()).is_none());
    // An answer that crossed one of this client's changes on the wire is not kept.
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/d/f".to_string()],
        subtree: false,
        dirs: true,
    });
    assert!(l.get("/d", "f", &me()).is_none());
    l.put("/d", "f", file(1), &grant("/d"), seen, "s1".into());
    assert!(
        l.get("/d", "f", &me()).is_none(),
        "sent before the change: not kept"
    );
    // A recall drops the lease's names and tells which.
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "f", file(1), &grant("/d"), seen, "s1".into());
    let dropped = l.drop_keys(&[grant("/d").key]);
    assert_eq!(dropped.len(), 1);
    let mut names = dropped[0].1.clone();
    names.sort();
    assert_eq!(names, vec!["f".to_string(), "g".to_string()]);
    assert!(l.get("/d", "f", &me()).is_none());
    // Past its period (as this client counts it), a lease covers nothing.
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "f", file(1), &grant("/d"), seen, "s1".into());
    tokio::time::advance(Duration::from_millis(721)).await;
    assert!(l.get("/d", "f", &me()).is_none());
    assert!(!l.run_goes_on("s1", 1), "nothing held: the run ends");
}

#[tokio::test(start_paused = true)]
async fn a_directory_moved_or_removed_by_this_client_takes_its_subtree_along() {
    let l = Leases::new(1);
    for dir in ["/a", "/a/b", "/ab"] {
        let seen = (Instant::now(), l.generation(dir));
        l.put(dir, "x", missing(), &grant(dir), seen, "s".into());
    }
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/a".to_string(), "/z".to_string()],
        subtree: true,
        dirs: true,
    });
    assert!(l.get("/a", "x", &me()).is_none());
    assert!(l.get("/a/b", "x", &me()).is_none());
    assert!(
        l.get("/ab", "x", &me()).is_some(),
        "a sibling with a longer name stays"
    );
    // A lost poll drops what came through that server.
    assert_eq!(l.drop_addr("s").len(), 1);
    assert!(l.get("/ab", "x", &me()).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_answer_stays_covered_until_its_lease_is_dropped() {
    let l = Leases::new(1);
    let mark = l.mark("/d");
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "f", file(1), &grant("/d"), seen, "s".into());
    assert!(l.covers("/d", "f", mark));
    assert!(!l.covers("/d", "g", mark), "a name not kept is not covered");
    // This client's own change forgets the name but drops no lease.
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/d/f".to_string()],
        subtree: false,
        dirs: true,
    });
    assert!(!l.covers("/d", "f", mark));
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "f", file(1), &grant("/d"), seen, "s".into());
    assert!(l.covers("/d", "f", mark), "own changes keep the mark");
    // A drop (a recall) ends the cover of everything asked before it, even once a new
    // lease holds the name again.
    l.drop_keys(&[grant("/d").key]);
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "f", file(1), &grant("/d"), seen, "s".into());
    assert!(!l.covers("/d", "f", mark));
    assert!(l.covers("/d", "f", l.mark("/d")));
    tokio::time::advance(Duration::from_millis(721)).await;
    assert!(!l.covers("/d", "f", l.mark("/d")), "past its trusted end");
}

#[tokio::test(start_paused = true)]
async fn leases_in_use_are_renewed_idle_ones_let_go_and_ending_ones_dropped() {
    use super::upkeep::{IDLE_AFTER, RENEW_EVERY};
    let l = Leases::new(1);
    for dir in ["/used", "/idle"] {
        let seen = (Instant::now(), l.generation(dir));
        l.put(dir, "x", missing(), &grant(dir), seen, "s".into());
    }
    // Renewed by the server each round, "/used" answered from each round: it lasts.
    let mut now_idle = Vec::new();
    let rounds = (IDLE_AFTER.as_millis() / RENEW_EVERY.as_millis()) as usize + 2;
    for _ in 0..rounds {
        tokio::time::advance(RENEW_EVERY).await;
        assert!(l.get("/used", "x", &me()).is_some());
        let round = l.round("s");
        l.drop_keys(&round.let_go);
        now_idle.extend(round.let_go.iter().map(|k| k.dir.clone()));
        let oks = vec![true; round.renew.len()];
        assert!(l.extend(&round.renew, &oks, Instant::now()).is_empty());
        assert!(l.ending("s").is_empty(), "a renewed lease is not ending");
    }
    assert_eq!(
        now_idle,
        vec!["/idle".to_string()],
        "only the idle one went"
    );
    assert!(l.get("/idle", "x", &me()).is_none());
    // A refused renewal is returned for dropping; with no renewal a lease is ending
    // `DROP_AHEAD` before its trusted end.
    let round = l.round("s");
    assert_eq!(
        l.extend(&round.renew, &[false], Instant::now()),
        round.renew
    );
    assert!(l.ending("s").is_empty());
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(l.ending("s").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_own_change_is_kept_only_under_a_lease_held_through_it() {
    let l = Leases::new(1);
    let part = grant("/d").key.partition;
    // No lease before the change: not kept (another client's change since the answer
    // would have recalled nothing).
    let own = l.before_own_change("/d");
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "other", missing(), &grant("/d"), seen, "s".into());
    l.put_own(("/d", "f"), part, file(1), own);
    assert!(l.get("/d", "f", &me()).is_none());
    // Held through the change: kept, under the partition holding the name only.
    let own = l.before_own_change("/d");
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/d/f".to_string()],
        subtree: false,
        dirs: true,
    });
    l.put_own(("/d", "f"), PartitionId(9), file(1), own);
    assert!(
        l.get("/d", "f", &me()).is_none(),
        "no lease of that partition"
    );
    l.put_own(("/d", "f"), part, file(1), own);
    assert!(l.get("/d", "f", &me()).is_some());
    // A drop during the change: not kept, even under a lease granted since.
    let own = l.before_own_change("/d");
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/d/g".to_string()],
        subtree: false,
        dirs: true,
    });
    l.drop_keys(&[grant("/d").key]);
    let seen = (Instant::now(), l.generation("/d"));
    l.put("/d", "other", missing(), &grant("/d"), seen, "s".into());
    l.put_own(("/d", "g"), part, file(1), own);
    assert!(l.get("/d", "g", &me()).is_none());
    // Hard-linked files never.
    let own = l.before_own_change("/d");
    l.put_own(("/d", "h"), part, file(2), own);
    assert!(l.get("/d", "h", &me()).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_whole_listing_shows_every_other_name_missing_until_this_client_changes_it() {
    let l = Leases::new(1);
    let mark = l.mark("/d");
    let seen = (Instant::now(), l.generation("/d"));
    let listing = vec![("a".to_string(), file(1)), ("b".to_string(), file(1))];
    l.put_many("/d", listing, Some(me()), &grant("/d"), seen, "s".into());
    assert!(matches!(
        l.get("/d", "a", &me()),
        Some(Cached::Found { .. })
    ));
    assert!(matches!(l.get("/d", "zz", &me()), Some(Cached::Missing)));
    assert!(l.covers("/d", "zz", mark), "a missing name is covered");
    let other = Caller {
        uid: 7,
        gid: 7,
        groups: Vec::new(),
    };
    assert!(l.get("/d", "zz", &other).is_none(), "for the lister only");
    // A name this client is changing is unknown until its answer is kept.
    let own = l.before_own_change("/d");
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/d/new".to_string()],
        subtree: false,
        dirs: true,
    });
    assert!(l.get("/d", "new", &me()).is_none());
    assert!(!l.covers("/d", "new", mark));
    l.put_own(("/d", "new"), grant("/d").key.partition, file(1), own);
    assert!(matches!(
        l.get("/d", "new", &me()),
        Some(Cached::Found { .. })
    ));
    l.forget_change(&crate::leases::Stale {
        paths: vec!["/d/a".to_string()],
        subtree: false,
        dirs: true,
    });
    assert!(
        l.get("/d", "a", &me()).is_none(),
        "changed, not answered: unknown"
    );
    // A listing that is not whole (or a file with links in it) shows nothing missing.
    let seen = (Instant::now(), l.generation("/e"));
    l.put_many(
        "/e",
        vec![("a".to_string(), file(1))],
        None,
        &grant("/e"),
        seen,
        "s".into(),
    );
    assert!(l.get("/e", "zz", &me()).is_none());
    let seen = (Instant::now(), l.generation("/f"));
    let linked = vec![("a".to_string(), file(2))];
    l.put_many("/f", linked, Some(me()), &grant("/f"), seen, "s".into());
    assert!(l.get("/f", "a", &me()).is_none() && l.get("/f", "zz", &me()).is_none());
    // A drop ends it.
    l.drop_keys(&[grant("/d").key]);
    assert!(l.get("/d", "zz", &me()).is_none());
}

/// An exclusive lease dropped (a late renewal answer, say) while changes answered behind
/// under it are unsent is still renewed at its server until they are sent, so another
/// client's change waits for them there (issue 47's refusal under load).
#[tokio::test(start_paused = true)]
async fn a_dropped_exclusive_lease_is_renewed_until_its_journal_is_sent() {
    let l = Leases::new(1);
    let mut g = grant("/d");
    g.exclusive = Some(match file(1).cached {
        Cached::Found { mut inode, .. } => {
            inode.kind = FileKind::Directory;
            inode
        }
        Cached::Missing => unreachable!(),
    });
    let seen = (Instant::now(), l.generation("/d"));
    assert_eq!(
        l.put("/d", "f", missing(), &g, seen, "s1".into()),
        Some(("s1".into(), 1))
    );
    let key = g.key.clone();
    let _started = l.journal.push(
        &key,
        crate::behind_journals::Op::new(
            &me(),
            None,
            myriad_proto::ClientRequest::Unlink {
                path: "/d/f".into(),
            },
        ),
    );
    // Dropped with a change unsent: still renewed at s1, and the run goes on.
    l.drop_keys(std::slice::from_ref(&key));
    assert!(
        l.get("/d", "f", &me()).is_none(),
        "nothing trusted under it"
    );
    assert_eq!(l.round("s1").renew, vec![key.clone()]);
    assert!(
        l.round("s2").renew.is_empty(),
        "only at the server that granted it"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(l.run_goes_on("s1", 1));
    // Once the change was sent, it is let go.
    let crate::behind_journals::Taken::Batch(_, batch) = l.journal.take_batch(&key) else {
        panic!("queued")
    };
    l.journal.done_n(&key, batch.len());
    assert!(l.round("s1").renew.is_empty());
    assert!(
        !l.run_goes_on("s1", 1),
        "nothing held or draining: the run ends"
    );
    // A shared lease dropped leaves nothing to renew.
    let seen = (Instant::now(), l.generation("/e"));
    l.put("/e", "f", missing(), &grant("/e"), seen, "s1".into());
    l.drop_keys(&[grant("/e").key]);
    assert!(l.round("s1").renew.is_empty());
}

/// A change of a name's attributes leaves its directory's own entry kept (a directory's
/// times follow its names, not their attributes); a create does not.
#[tokio::test(start_paused = true)]
async fn a_setattr_keeps_its_directory_s_entry_and_a_create_does_not() {
    let l = Leases::new(1);
    let keep = |l: &Leases| {
        let seen = (Instant::now(), l.generation("/"));
        l.put("/", "d", file(1), &grant("/"), seen, "s1".into());
        assert!(l.get("/", "d", &me()).is_some());
    };
    let setattr = ClientRequest::SetAttr {
        path: "/d/f".into(),
        set: myriad_proto::SetAttr::default(),
    };
    keep(&l);
    l.forget_change(&changed_paths(&setattr));
    assert!(l.get("/", "d", &me()).is_some(), "a setattr of /d/f");
    let unlink = ClientRequest::Unlink {
        path: "/d/f".into(),
    };
    l.forget_change(&changed_paths(&unlink));
    assert!(l.get("/", "d", &me()).is_none(), "an unlink in /d");
    keep(&l);
    let link = ClientRequest::Link {
        from: "/e/f".into(),
        to: "/d/g".into(),
    };
    l.forget_change(&changed_paths(&link));
    assert!(l.get("/", "d", &me()).is_none(), "a link into /d");
}

/// An rmdir answered behind: only while the directory shows no name; the directory's part
/// is given up at once but its lease is still renewed at its server until the rmdir is
/// answered (another client's create there must recall this client, which sends the
/// rmdir first), and the parent's kept entry loses a link.
#[tokio::test(start_paused = true)]
async fn a_removed_directory_s_lease_is_renewed_until_its_rmdir_is_answered() {
    let l = Leases::new(1);
    let dir = |nlink: u32| match file(1).cached {
        Cached::Found { mut inode, .. } => {
            inode.kind = FileKind::Directory;
            inode.nlink = nlink;
            inode
        }
        Cached::Missing => unreachable!(),
    };
    let exclusive = |d: &str| LeaseGrant {
        exclusive: Some(dir(2)),
        ..grant(d)
    };
    let hold = |d: &str, names: Vec<(String, Entry)>| {
        let seen = (Instant::now(), l.generation(d));
        l.put_many(d, names, Some(me()), &exclusive(d), seen, "s1".into());
    };
    let x = Entry::attrs(me(), dir(2));
    hold("/", vec![("d".into(), Entry::attrs(me(), dir(3)))]);
    hold("/d", vec![("x".into(), x)]);
    hold("/d/x", vec![("f".into(), file(1))]);
    let rmdir = |l: &Leases| {
        l.behind(("/d", Some("/d/x")), PartitionId(2), &me(), |mut held| {
            held.set("x", None);
            let op = crate::behind_journals::Op::new(
                &me(),
                None,
                ClientRequest::Rmdir {
                    path: "/d/x".into(),
                },
            );
            let _ = l.journal.push(&grant("/d").key, op.of_directory());
            let touch = Touch { at: 7, subdirs: -1 };
            Some(((), Some(touch)))
        })
    };
    // Not while /d/x holds a name.
    assert!(rmdir(&l).is_none(), "a directory holding f");
    hold("/d/x", Vec::new());
    l.forget_name("/d/x", "f");
    let _ = l.behind(("/d/x", None), PartitionId(2), &me(), |mut held| {
        held.set("f", None);
        Some(((), None))
    });
    assert!(rmdir(&l).is_some(), "an empty directory");
    assert!(l.get("/d/x", "f", &me()).is_none(), "its part is given up");
    let Some(Cached::Found { inode, .. }) = l.get("/", "d", &me()) else {
        panic!("/d's entry kept")
    };
    assert_eq!(
        (inode.nlink, inode.mtime_ns),
        (2, 7),
        "one link less, its time"
    );
    let removed = grant("/d/x").key;
    assert!(
        l.round("s1").renew.contains(&removed),
        "renewed while the rmdir is unsent"
    );
    let parent = grant("/d").key;
    let crate::behind_journals::Taken::Batch(_, batch) = l.journal.take_batch(&parent) else {
        panic!("the rmdir is queued")
    };
    assert!(
        l.round("s1").renew.contains(&removed),
        "and while it is in flight"
    );
    l.journal.done_n(&parent, batch.len());
    assert!(
        !l.round("s1").renew.contains(&removed),
        "let go once answered"
    );
}

/// A directory made behind is held from its birth: exclusive, listed whole and empty,
/// answering changes behind; not asked to be renewed before its mkdir is sent, renewed
/// from then, and a refusal while its mkdir is on its way (its server does not know the
/// lease yet) does not drop it; once the mkdir is answered, a refusal does.
#[tokio::test(start_paused = true)]
async fn a_birth_lease_survives_refusals_only_while_its_mkdir_is_on_its_way() {
    let l = Leases::new(1);
    let attrs = Inode::new(InodeId(9), FileKind::Directory, 0o755, (0, 0), 1);
    let parent = LeaseKey {
        partition: PartitionId(1),
        dir: "/".into(),
    };
    let mkdir = ClientRequest::MkdirNumbered {
        path: "/n".into(),
        mode: 0o755,
        ino: InodeId(9),
    };
    let op = crate::behind_journals::Op::new(&me(), None, mkdir).of_directory();
    let _started = l.journal.push(&parent, op);
    let held = ("/n", PartitionId(2), "s2".to_string());
    let lease = (Instant::now(), Duration::from_millis(800));
    assert_eq!(
        l.put_born(held.clone(), &me(), attrs.clone(), lease),
        Some(("s2".into(), 1)),
        "its server's poll starts"
    );
    assert!(l.answers_behind("/n", PartitionId(2), &me()));
    assert!(l.holds_for_changes("/n", &me()));
    assert_eq!(l.listing("/n", &me()).map(|v| v.len()), Some(0), "empty");
    let key = LeaseKey {
        partition: PartitionId(2),
        dir: "/n".into(),
    };
    assert!(l.round("s2").renew.is_empty(), "no server knows it yet");
    l.born_sent("/n", Instant::now());
    assert_eq!(l.round("s2").renew, vec![key.clone()], "renewed once sent");
    let sent = Instant::now();
    assert!(
        l.extend(std::slice::from_ref(&key), &[false], sent)
            .is_empty(),
        "a refusal while its mkdir is on its way does not drop it"
    );
    assert!(l.answers_behind("/n", PartitionId(2), &me()));
    // Held already: not held again from a birth.
    assert_eq!(l.put_born(held, &me(), attrs, lease), None);
    let crate::behind_journals::Taken::Batch(_, ops) = l.journal.take_batch(&parent) else {
        panic!("the mkdir is sent")
    };
    l.journal.done_n(&parent, ops.len());
    assert_eq!(
        l.extend(std::slice::from_ref(&key), &[false], sent),
        vec![key],
        "refused once its mkdir is answered: dropped"
    );
}

/// A birth lease whose mkdir waits in the journal (a backlog) is trusted past its period
/// while its parent is held exclusively, and no longer than the parent (review of stop
/// 91: another client may make the same name once the parent is given up). From the
/// moment the mkdir is taken to be sent it lasts as a grant sent then would, and ends
/// unrenewed. A mkdir taken before the mount held its directory (`born_sent` first)
/// counts as sent.
#[tokio::test(start_paused = true)]
async fn a_birth_lease_lasts_while_its_mkdir_is_unsent_and_a_period_from_its_send() {
    let l = Leases::new(1);
    let attrs = Inode::new(InodeId(9), FileKind::Directory, 0o755, (0, 0), 1);
    let root = LeaseGrant {
        exclusive: Some(attrs.clone()),
        ..grant("/")
    };
    let seen = (Instant::now(), l.generation("/"));
    l.put_many("/", vec![], Some(me()), &root, seen, "s1".into());
    let held = ("/n", PartitionId(3), "s2".to_string());
    let period = Duration::from_millis(800);
    assert!(
        l.put_born(held, &me(), attrs.clone(), (Instant::now(), period))
            .is_some()
    );
    for _ in 0..10 {
        tokio::time::advance(Duration::from_millis(200)).await;
        // The parent renewed.
        assert!(
            l.extend(std::slice::from_ref(&root.key), &[true], Instant::now())
                .is_empty()
        );
        let round = l.round("s2");
        assert!(round.renew.is_empty() && round.let_go.is_empty());
        assert!(l.ending("s2").is_empty(), "not ending while unsent");
    }
    assert!(
        l.answers_behind("/n", PartitionId(3), &me()),
        "held 2 s after its answer, its mkdir unsent"
    );
    // The parent no longer renewed: the child lasts no longer than it.
    for _ in 0..4 {
        tokio::time::advance(Duration::from_millis(200)).await;
        let _ = l.round("s2");
    }
    assert!(
        !l.answers_behind("/n", PartitionId(3), &me()),
        "not past its parent's end"
    );

    // Sent: trusted from the send.
    let seen = (Instant::now(), l.generation("/"));
    l.put_many("/", vec![], Some(me()), &root, seen, "s1".into());
    let held = ("/o", PartitionId(4), "s2".to_string());
    let _ = l.put_born(held, &me(), attrs.clone(), (Instant::now(), period));
    tokio::time::advance(Duration::from_millis(400)).await;
    l.born_sent("/o", Instant::now());
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(l.answers_behind("/o", PartitionId(4), &me()));
    let o = LeaseKey {
        partition: PartitionId(4),
        dir: "/o".into(),
    };
    assert!(
        l.ending("s2").contains(&o),
        "unrenewed 0.5 s after its send: ending"
    );
    tokio::time::advance(Duration::from_millis(300)).await;
    assert!(
        !l.answers_behind("/o", PartitionId(4), &me()),
        "past 90% of a period from its send"
    );

    // Taken to be sent before the mount held it: trusted from its answer only.
    l.born_sent("/m", Instant::now());
    let held = ("/m", PartitionId(5), "s2".to_string());
    let _ = l.put_born(held, &me(), attrs, (Instant::now(), period));
    assert!(l.answers_behind("/m", PartitionId(5), &me()));
    tokio::time::advance(Duration::from_millis(200)).await;
    let m = LeaseKey {
        partition: PartitionId(5),
        dir: "/m".into(),
    };
    assert!(l.round("s2").renew.contains(&m), "asked to be renewed");
    tokio::time::advance(Duration::from_millis(600)).await;
    assert!(
        !l.answers_behind("/m", PartitionId(5), &me()),
        "unrenewed past 90% of a period from its answer"
    );
}
