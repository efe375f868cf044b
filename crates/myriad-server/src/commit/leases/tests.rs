use super::*;

fn table() -> (Arc<LeaseTable>, Arc<Recalls>) {
    let recalls = Arc::new(Recalls::default());
    (
        Arc::new(LeaseTable::new(PartitionId(1), recalls.clone())),
        recalls,
    )
}

fn dirs(d: &str) -> ChangedDirs {
    ChangedDirs::Dirs(vec![d.to_string()])
}

fn marks(d: &str) -> ChangedDirs {
    ChangedDirs::Marks(vec![d.to_string()])
}

#[tokio::test(start_paused = true)]
async fn a_change_waits_for_the_release_of_other_holders_leases_not_its_own() {
    let (t, recalls) = table();
    // Holder 7 polls, so it can be told.
    let poll = {
        let r = recalls.clone();
        tokio::spawn(async move { r.poll(7, Duration::from_secs(5)).await })
    };
    tokio::task::yield_now().await;
    assert!(t.grant("/d", 7, false).is_some());
    assert!(t.grant("/d", 8, false).is_some());
    // Holder 8's own change does not wait for its own lease, but for 7's.
    let started = Instant::now();
    let change = {
        let t = t.clone();
        tokio::spawn(async move {
            let g = t.before(dirs("/d"), Some(8), &Exempt::default()).await;
            (Instant::now(), g)
        })
    };
    let recalled = poll.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        recalled,
        vec![t.key("/d")],
        "holder 7 is asked to give /d back"
    );
    // Nothing granted on /d while the change is under way.
    assert!(t.grant("/d", 9, false).is_none());
    assert!(!t.renew("/d", 7), "no renewal while a change is under way");
    tokio::time::advance(Duration::from_millis(100)).await;
    t.release("/d", 7);
    let (passed_at, guard) = change.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(passed_at - started < LEASE_PERIOD, "released, not expired");
    assert!(
        t.grant("/d", 9, false).is_none(),
        "still under way until applied"
    );
    drop(guard);
    // One change alone does not make /d contended: granted again at once.
    assert!(t.grant("/d", 9, false).is_some());
    // Other directories were never held back.
    assert!(t.grant("/e", 7, false).is_some());
}

/// A change by `changer` of `dir` that recalls `holder`'s lease, given back at once.
async fn change_recalling(t: &Arc<LeaseTable>, dir: &str, changer: u64, holder: u64) {
    let change = {
        let t = t.clone();
        let dir = dir.to_string();
        tokio::spawn(async move {
            drop(
                t.before(dirs(&dir), Some(changer), &Exempt::default())
                    .await,
            )
        })
    };
    tokio::task::yield_now().await;
    t.release(dir, holder);
    change.await.unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(start_paused = true)]
async fn two_changes_recalling_leases_within_the_window_make_a_directory_contended() {
    let (t, _recalls) = table();
    assert!(t.grant("/d", 7, false).is_some());
    change_recalling(&t, "/d", 8, 7).await;
    tokio::time::advance(CONTENDED_FOR / 2).await;
    assert!(
        t.grant("/d", 7, false).is_some(),
        "one recall: not contended"
    );
    change_recalling(&t, "/d", 8, 7).await;
    assert!(t.grant("/d", 7, false).is_none(), "two within the window");
    assert!(t.grant("/d", 8, false).is_none(), "for every client");
    tokio::time::advance(CONTENDED_FOR - Duration::from_millis(1)).await;
    assert!(t.grant("/d", 7, false).is_none(), "for the whole period");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(t.grant("/d", 7, false).is_some(), "then leased again");
    // Changes that recall nothing (no holder but the changer) never make it contended.
    assert!(t.grant("/q", 8, false).is_some());
    for _ in 0..3 {
        drop(t.before(dirs("/q"), Some(8), &Exempt::default()).await);
    }
    assert!(t.grant("/q", 9, false).is_some());
    // Two recalls further apart than the window do not either.
    assert!(t.grant("/r", 7, false).is_some());
    change_recalling(&t, "/r", 8, 7).await;
    tokio::time::advance(CONTENDED_FOR).await;
    assert!(t.grant("/r", 7, false).is_some());
    change_recalling(&t, "/r", 8, 7).await;
    assert!(t.grant("/r", 7, false).is_some(), "apart: not contended");
}

#[tokio::test(start_paused = true)]
async fn a_holder_that_does_not_answer_is_waited_out_and_nothing_else_waits() {
    let (t, _recalls) = table();
    assert!(t.grant("/d", 7, false).is_some());
    tokio::time::advance(Duration::from_millis(300)).await;
    let started = Instant::now();
    let g = t.before(dirs("/d"), None, &Exempt::default()).await;
    let waited = started.elapsed();
    assert!(waited >= LEASE_PERIOD - Duration::from_millis(300));
    assert!(waited <= LEASE_PERIOD);
    drop(g);
    // No holders: no wait at all.
    let started = Instant::now();
    drop(t.before(dirs("/other"), None, &Exempt::default()).await);
    drop(t.before(ChangedDirs::None, None, &Exempt::default()).await);
    assert_eq!(started.elapsed(), Duration::ZERO);
    // An expired lease is not renewed.
    assert!(t.grant("/x", 3, false).is_some());
    tokio::time::advance(LEASE_PERIOD).await;
    assert!(!t.renew("/x", 3));
}

/// Issue 47's refusal under load: a recalled exclusive holder still sending its journal
/// is waited for past its lease end (each change it sends keeps it a lease period more, up
/// to `RECALLED_DRAIN_MAX`); one gone silent is waited out one lease period after its
/// last change.
#[tokio::test(start_paused = true)]
async fn a_recalled_holder_still_sending_its_changes_is_waited_for() {
    let (t, _recalls) = table();
    assert_eq!(t.grant("/w", 7, true).map(|g| g.exclusive), Some(true));
    let started = Instant::now();
    let read = {
        let t = t.clone();
        tokio::spawn(async move {
            t.before_attrs_change("/w", Some(8)).await;
            Instant::now()
        })
    };
    tokio::task::yield_now().await;
    // Holder 7 sends a change every half lease for three lease periods.
    let sending_for = 3 * LEASE_PERIOD;
    while started.elapsed() < sending_for {
        tokio::time::advance(LEASE_PERIOD / 2).await;
        drop(t.before(dirs("/w"), Some(7), &Exempt::default()).await);
        assert!(!read.is_finished(), "the recall waits while 7 sends");
    }
    let passed = read.await.unwrap_or_else(|e| panic!("{e}"));
    let waited = passed - started;
    assert!(
        waited >= sending_for + LEASE_PERIOD - Duration::from_millis(1),
        "{waited:?}"
    );
    assert!(
        waited <= sending_for + LEASE_PERIOD + LEASE_PERIOD / 2,
        "{waited:?}"
    );

    // A holder that keeps sending forever is waited for at most the bound.
    assert_eq!(t.grant("/v", 5, true).map(|g| g.exclusive), Some(true));
    let started = Instant::now();
    let read = {
        let t = t.clone();
        tokio::spawn(async move {
            t.before_read("/v", Some(8)).await;
            Instant::now()
        })
    };
    tokio::task::yield_now().await;
    while !read.is_finished() {
        assert!(started.elapsed() <= RECALLED_DRAIN_MAX + LEASE_PERIOD);
        tokio::time::advance(LEASE_PERIOD / 4).await;
        drop(t.before(dirs("/v"), Some(5), &Exempt::default()).await);
    }
    let waited = read.await.unwrap_or_else(|e| panic!("{e}")) - started;
    assert!(waited >= RECALLED_DRAIN_MAX - LEASE_PERIOD, "{waited:?}");
    // Renewals of a recalled exclusive holder (its journal still sending) keep it too,
    // refused all the same.
    assert_eq!(t.grant("/t", 6, true).map(|g| g.exclusive), Some(true));
    let started = Instant::now();
    let read = {
        let t = t.clone();
        tokio::spawn(async move {
            t.before_read("/t", Some(8)).await;
            Instant::now()
        })
    };
    tokio::task::yield_now().await;
    for _ in 0..8 {
        tokio::time::advance(LEASE_PERIOD / 2).await;
        assert!(!t.renew("/t", 6), "refused while the recall waits");
        assert!(!read.is_finished(), "alive: waited for");
    }
    t.release("/t", 6);
    let waited = read.await.unwrap_or_else(|e| panic!("{e}")) - started;
    assert!(waited >= 4 * LEASE_PERIOD, "{waited:?}");
    // Another client's change never extends 5's lease.
    assert_eq!(t.grant("/u", 5, true).map(|g| g.exclusive), Some(true));
    let started = Instant::now();
    let read = {
        let t = t.clone();
        tokio::spawn(async move {
            t.before_read("/u", Some(8)).await;
            Instant::now()
        })
    };
    tokio::task::yield_now().await;
    tokio::time::advance(LEASE_PERIOD / 2).await;
    drop(t.before(dirs("/u"), Some(9), &Exempt::default()).await);
    let waited = read.await.unwrap_or_else(|e| panic!("{e}")) - started;
    assert!(waited <= LEASE_PERIOD, "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_change_of_everything_recalls_every_lease_and_holds_every_grant() {
    let (t, _recalls) = table();
    assert!(t.grant("/a", 1, false).is_some());
    assert!(t.grant("/b", 2, false).is_some());
    let change = {
        let t = t.clone();
        tokio::spawn(async move { t.before(ChangedDirs::All, None, &Exempt::default()).await })
    };
    tokio::task::yield_now().await;
    assert!(t.grant("/c", 3, false).is_none());
    t.release("/a", 1);
    tokio::task::yield_now().await;
    assert!(!change.is_finished(), "still waiting for /b");
    t.release("/b", 2);
    let g = change.await.unwrap_or_else(|e| panic!("{e}"));
    drop(g);
    assert!(t.grant("/c", 3, false).is_some());
    assert!(t.renew("/c", 3));
}

#[tokio::test(start_paused = true)]
async fn changes_of_directories_nobody_holds_leave_nothing_behind() {
    let (t, _recalls) = table();
    for i in 0..100 {
        drop(
            t.before(dirs(&format!("/d{i}")), None, &Exempt::default())
                .await,
        );
    }
    assert_eq!(
        t.dirs_kept(),
        0,
        "no lease held: nothing kept per directory"
    );
    assert!(t.grant("/held", 1, false).is_some());
    drop(t.before(dirs("/held"), Some(1), &Exempt::default()).await);
    assert_eq!(t.dirs_kept(), 1, "a held lease is kept");
}

#[tokio::test(start_paused = true)]
async fn a_touch_reporting_a_clients_change_does_not_recall_that_clients_lease() {
    let (t, _recalls) = table();
    assert!(t.grant("/p", 7, false).is_some());
    // A touch of /p for client 7's change, sent by another partition (no task client):
    // 7 keeps its lease, and /p is not held contended.
    let started = Instant::now();
    let exempt = Exempt::of([("/p".to_string(), Some(7))]);
    let guard = t.before(dirs("/p"), None, &exempt).await;
    assert_eq!(Instant::now(), started, "nothing waited for");
    drop(guard);
    assert!(t.renew("/p", 7));
    assert!(t.grant("/p", 8, false).is_some(), "not contended");
    // A batch touching /p for two clients exempts neither: 7's lease is waited out.
    let exempt = Exempt::of([("/p".to_string(), Some(7)), ("/p".to_string(), Some(8))]);
    let guard = t.before(dirs("/p"), None, &exempt).await;
    assert!(
        Instant::now() - started >= LEASE_PERIOD / 2,
        "waited for the holders"
    );
    drop(guard);
}

/// Another partition's side of a client's change (a rename's target, a link's name) names
/// that client for every directory it changes: its leases there are not recalled, another
/// client's are.
#[tokio::test(start_paused = true)]
async fn a_peer_side_of_a_clients_change_does_not_recall_that_clients_leases() {
    let (t, _recalls) = table();
    assert!(t.grant("/a", 7, false).is_some());
    assert!(t.grant("/b", 7, false).is_some());
    let started = Instant::now();
    let guard = t.before(dirs("/a"), None, &Exempt::client(Some(7))).await;
    assert_eq!(Instant::now(), started, "nothing waited for");
    drop(guard);
    let guard = t.before(dirs("/b"), None, &Exempt::client(Some(7))).await;
    assert_eq!(
        Instant::now(),
        started,
        "nothing waited for in another directory"
    );
    drop(guard);
    assert!(t.renew("/a", 7) && t.renew("/b", 7), "7 keeps both leases");
    // For client 8's change, 7's lease is recalled and waited for.
    let guard = t.before(dirs("/a"), None, &Exempt::client(Some(8))).await;
    assert!(
        Instant::now() - started >= LEASE_PERIOD / 2,
        "waited for the holder"
    );
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn a_client_keeps_renewing_its_lease_while_its_own_changes_are_under_way() {
    let (t, _recalls) = table();
    assert!(t.grant("/d", 7, false).is_some());
    let own = t.before(dirs("/d"), Some(7), &Exempt::default()).await;
    assert!(
        t.renew("/d", 7),
        "its own change does not stop its renewals"
    );
    assert!(t.grant("/d", 7, false).is_some());
    assert!(
        t.grant("/d", 8, false).is_none(),
        "but nobody else's grants"
    );
    drop(own);
    assert!(t.grant("/d", 8, false).is_some());
}

#[tokio::test(start_paused = true)]
async fn an_exclusive_lease_is_granted_alone_and_any_other_readers_read_recalls_it() {
    let (t, recalls) = table();
    // Shared holders exist: no exclusive grant, though the lease is granted.
    assert_eq!(t.grant("/s", 1, false).map(|g| g.exclusive), Some(false));
    assert_eq!(t.grant("/s", 2, true).map(|g| g.exclusive), Some(false));
    // Alone: exclusive, and it stays so for its holder's later (shared) grants.
    assert_eq!(t.grant("/d", 7, true).map(|g| g.exclusive), Some(true));
    assert_eq!(t.grant("/d", 7, false).map(|g| g.exclusive), Some(true));
    // Nobody else is granted anything on it.
    assert!(t.grant("/d", 8, false).is_none());
    // The holder's own reads pass at once.
    let started = Instant::now();
    t.before_read("/d", Some(7)).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    // Another reader's read (named or not) recalls it and waits for the release.
    let poll = {
        let r = recalls.clone();
        tokio::spawn(async move { r.poll(7, Duration::from_secs(5)).await })
    };
    let read = {
        let t = t.clone();
        tokio::spawn(async move {
            t.before_read("/d", Some(8)).await;
            Instant::now()
        })
    };
    let recalled = poll.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recalled, vec![t.key("/d")]);
    assert!(!t.renew("/d", 7), "no renewal of a lease being recalled");
    tokio::time::advance(Duration::from_millis(50)).await;
    assert!(!read.is_finished(), "the read waits for the holder");
    t.release("/d", 7);
    let passed = read.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(passed - started < LEASE_PERIOD, "released, not expired");
    // A reader's recall does not make the directory contended: the reader gets a
    // shared lease, and the old holder too, but neither an exclusive one.
    assert_eq!(t.grant("/d", 8, false).map(|g| g.exclusive), Some(false));
    assert_eq!(t.grant("/d", 7, true).map(|g| g.exclusive), Some(false));
    // An unnamed reader waits out a silent holder, for at most a period.
    assert_eq!(t.grant("/q", 5, true).map(|g| g.exclusive), Some(true));
    let started = Instant::now();
    t.before_read("/q", None).await;
    assert!(started.elapsed() <= LEASE_PERIOD);
    assert!(started.elapsed() >= LEASE_PERIOD - Duration::from_millis(1));
    assert_eq!(
        t.grant("/q", 6, true).map(|g| g.exclusive),
        Some(true),
        "expired: free"
    );
}

#[tokio::test(start_paused = true)]
async fn an_exclusive_lease_made_shared_lets_others_read_at_once() {
    let (t, _recalls) = table();
    assert_eq!(t.grant("/d", 7, true).map(|g| g.exclusive), Some(true));
    t.share("/d", 7);
    let started = Instant::now();
    t.before_read("/d", Some(8)).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    // A change by another client still recalls it, as any lease.
    assert!(t.grant("/d", 8, false).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_read_dropped_while_it_waits_for_an_exclusive_lease_holds_nothing_back() {
    let (t, _recalls) = table();
    assert_eq!(t.grant("/d", 7, true).map(|g| g.exclusive), Some(true));
    let read = {
        let t = t.clone();
        tokio::spawn(async move { t.before_read("/d", Some(8)).await })
    };
    tokio::time::advance(Duration::from_millis(50)).await;
    assert!(!t.renew("/d", 7), "held back while the read waits");
    read.abort();
    let _ = read.await;
    assert!(t.renew("/d", 7), "renewed again once the read is gone");
}

/// A mark of an indexed tree changes no entry: shared holders keep their leases (and
/// later grants are not held back), an exclusive holder gives its lease back first (its
/// journal reaches the servers before the mark), and the mark is not a change for
/// `last_change`.
#[tokio::test(start_paused = true)]
async fn a_mark_recalls_only_exclusive_leases_and_is_not_a_change() {
    let (t, _recalls) = table();
    assert!(t.grant("/shared", 7, false).is_some());
    assert!(t.grant("/shared", 8, false).is_some());
    let started = Instant::now();
    drop(t.before(marks("/shared"), None, &Exempt::default()).await);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no shared lease recalled"
    );
    assert!(t.renew("/shared", 7), "still held");
    assert!(t.grant("/shared", 9, false).is_some(), "nor contended");
    assert_eq!(t.last_change("/shared"), None);
    let g = t.grant("/mine", 7, true);
    assert!(g.is_some_and(|g| g.exclusive));
    let started = Instant::now();
    drop(t.before(marks("/mine"), None, &Exempt::default()).await);
    assert!(
        started.elapsed() > Duration::ZERO,
        "the exclusive lease was waited for"
    );
    assert_eq!(t.last_change("/mine"), None);
    // A change of entries recalls shared leases and is noted (the ones above expired
    // while the exclusive lease was waited out).
    assert!(t.grant("/shared", 10, false).is_some());
    let started = Instant::now();
    drop(t.before(dirs("/shared"), None, &Exempt::default()).await);
    assert!(started.elapsed() > Duration::ZERO);
    assert!(t.last_change("/shared").is_some());
}

/// docs/zones.md "Nearest copy": copies answer reads without this table, so a loan of reads
/// and an exclusive lease (creates answered behind) never overlap.
#[tokio::test(start_paused = true)]
async fn reads_are_lent_to_copies_only_while_no_exclusive_lease_exists() {
    let (t, _recalls) = table();
    let g = t.grant("/d", 7, true);
    assert!(
        g.is_some_and(|g| g.exclusive),
        "no exclusive lease to start with"
    );
    let until = Instant::now() + Duration::from_secs(2);
    assert!(
        !t.lend_reads(until),
        "reads lent while an exclusive lease is held"
    );
    // Once it has ended, reads are lent, and no exclusive lease is granted until the loan
    // ends (a shared one is).
    tokio::time::sleep(LEASE_PERIOD + Duration::from_secs(1)).await;
    assert!(t.lend_reads(Instant::now() + Duration::from_secs(2)));
    let g = t.grant("/e", 8, true);
    assert!(
        g.is_some_and(|g| !g.exclusive),
        "an exclusive lease granted while reads are lent"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g = t.grant("/f", 9, true);
    assert!(
        g.is_some_and(|g| g.exclusive),
        "no exclusive lease after the loan"
    );
}

/// A directory made behind is held by its maker from its birth (docs/fuse.md "mkdir
/// behind"): exclusive, with the attributes the maker answered, so another client's read
/// recalls it; not granted while another client holds a lease on that path.
#[tokio::test(start_paused = true)]
async fn a_birth_lease_is_exclusive_and_recalled_by_another_s_read() {
    let (t, recalls) = table();
    let attrs = myriad_proto::Inode::new(
        myriad_proto::InodeId(42),
        myriad_proto::FileKind::Directory,
        0o755,
        (1000, 1000),
        1,
    );
    assert!(t.grant_born("/n", 7, attrs.clone()));
    let g = t
        .grant("/n", 7, true)
        .unwrap_or_else(|| panic!("renewed grant"));
    assert!(g.exclusive, "exclusive from its birth");
    assert_eq!(
        g.attrs.map(|a| a.ino),
        Some(attrs.ino),
        "its attributes kept"
    );
    let poll = {
        let r = recalls.clone();
        tokio::spawn(async move { r.poll(7, Duration::from_secs(5)).await })
    };
    tokio::task::yield_now().await;
    let read = {
        let t = t.clone();
        tokio::spawn(async move { t.before_read("/n", Some(8)).await })
    };
    let recalled = poll.await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recalled, vec![t.key("/n")], "another's read recalls it");
    t.release("/n", 7);
    read.await.unwrap_or_else(|e| panic!("{e}"));
    // Another client holds "/m": no birth lease there for 7 (its mkdir is sent again).
    assert!(t.grant("/m", 8, false).is_some());
    assert!(!t.grant_born("/m", 7, attrs));
}
