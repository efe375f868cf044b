//! The leader's failure detector and the grace before copies move, as pure decisions over
//! what the leader heard and when (membership events: down, up, past grace).

use std::collections::BTreeMap;

use super::*;

const S: [NodeId; 4] = [NodeId(1), NodeId(2), NodeId(3), NodeId(4)];

fn four() -> ClusterMap {
    let addrs: Vec<String> = (1..=4).map(|i| format!("s{i}:1")).collect();
    ClusterMap::build(1, &addrs, 2, 3)
}

/// `now` is `since` + `secs`; every server was heard at the given offsets (seconds after
/// `since`), listed in the map since `since`.
fn round(
    map: &ClusterMap,
    me: NodeId,
    heard_at: &[(NodeId, f64)],
    secs: f64,
) -> Option<(ClusterMap, Change)> {
    let since = Instant::now();
    let at: BTreeMap<NodeId, Instant> = heard_at
        .iter()
        .map(|&(n, t)| (n, since + Duration::from_secs_f64(t)))
        .collect();
    detect(
        map,
        me,
        (since, since + Duration::from_secs_f64(secs)),
        |id| at.get(&id).copied(),
        |_| since,
        |_| DOWN_AFTER,
    )
}

#[test]
fn a_silent_server_goes_down_after_down_after_and_never_the_leader() {
    let m = four();
    let all_recent: Vec<_> = S.iter().map(|&n| (n, 5.0)).collect();
    assert_eq!(round(&m, S[0], &all_recent, 6.0), None, "everyone heard");
    // Server 3 last heard at 0.5 s; just before DOWN_AFTER later it is not silent long
    // enough yet, just after it is.
    let mut heard = all_recent.clone();
    heard[2] = (S[2], 0.5);
    let down_at = 0.5 + DOWN_AFTER.as_secs_f64();
    assert_eq!(round(&m, S[0], &heard, down_at - 0.1), None);
    let Some((next, change)) = round(&m, S[0], &heard, down_at + 0.1) else {
        panic!("server 3 silent for DOWN_AFTER stays up");
    };
    assert!(matches!(change, Change::Down { server, .. } if server == S[2]));
    assert!(!next.is_up(S[2]));
    assert_eq!(next.epoch, m.epoch + 1);
    // The leader itself, silent to itself, is never marked down.
    let mut heard: Vec<_> = S.iter().map(|&n| (n, 8.5)).collect();
    heard[0] = (S[0], 0.0);
    assert_eq!(round(&m, S[0], &heard, 9.0), None);
}

/// Found by running docs/deploy.md: a server leaving (drained, or removed by `node
/// remove`) that dies was never marked down, so the partitions it led or copied waited
/// for it. One that still holds copies is failed over like any other; one holding
/// nothing stays leaving, to be dropped from the map.
#[test]
fn a_silent_leaving_server_goes_down_while_it_holds_copies() {
    let leaving = four()
        .mark_leaving(S[2])
        .unwrap_or_else(|| panic!("may leave"));
    let mut heard: Vec<_> = S.iter().map(|&n| (n, 5.0)).collect();
    heard[2] = (S[2], 0.5);
    let late = 0.6 + DOWN_AFTER.as_secs_f64();
    let Some((next, change)) = round(&leaving, S[0], &heard, late) else {
        panic!("a silent leaving server holding copies stays up");
    };
    assert!(matches!(change, Change::Down { server, .. } if server == S[2]));
    assert!(!next.is_up(S[2]));
    let mut emptied = leaving.clone();
    for p in &mut emptied.partitions {
        p.replicas.retain(|r| *r != S[2]);
    }
    assert_eq!(
        round(&emptied, S[0], &heard, late),
        None,
        "holds nothing: left leaving"
    );
}

#[test]
fn one_change_a_round_in_server_order() {
    let m = four();
    // Servers 2 and 4 both silent: only 2 this round.
    let heard = [(S[0], 9.0), (S[2], 9.0)];
    let Some((next, change)) = round(&m, S[0], &heard, 10.0) else {
        panic!("nobody marked down");
    };
    assert!(matches!(change, Change::Down { server, .. } if server == S[1]));
    assert!(next.is_up(S[3]), "one change per round");
    // The next round starts from that map and takes server 4.
    let Some((_, change)) = round(&next, S[0], &heard, 10.0) else {
        panic!("server 4 left up");
    };
    assert!(matches!(change, Change::Down { server, .. } if server == S[3]));
}

#[test]
fn a_down_server_that_asks_again_comes_back_up() {
    let m = four()
        .mark_down(S[1])
        .unwrap_or_else(|| panic!("server 2 is up"));
    let others = [(S[0], 10.0), (S[2], 10.0), (S[3], 10.0)];
    // Heard long ago (more than three renewal periods): stays down.
    let mut heard = others.to_vec();
    heard.push((S[1], 5.0));
    assert_eq!(round(&m, S[0], &heard, 10.0), None);
    // Heard just now: up again, as a backup (last in its lists).
    heard[3] = (S[1], 9.9);
    let Some((next, change)) = round(&m, S[0], &heard, 10.0) else {
        panic!("the server that asked again stays down");
    };
    assert_eq!(change, Change::Up { server: S[1] });
    assert!(next.is_up(S[1]));
    assert!(next.primaries_of(S[1]).is_empty());
}

#[test]
fn a_just_added_server_gets_down_after_to_make_itself_heard() {
    let m = four();
    let since = Instant::now();
    let added_at = since + Duration::from_secs(20);
    let heard = |id: NodeId| (id != S[3]).then_some(since + Duration::from_secs(24));
    let listed = |id: NodeId| if id == S[3] { added_at } else { since };
    let now = added_at + DOWN_AFTER - Duration::from_millis(200);
    assert_eq!(
        detect(&m, S[0], (since, now), heard, listed, |_| DOWN_AFTER),
        None
    );
    let later = added_at + DOWN_AFTER + Duration::from_millis(200);
    let heard_later = |id: NodeId| (id != S[3]).then_some(later);
    let Some((_, change)) = detect(&m, S[0], (since, later), heard_later, listed, |_| {
        DOWN_AFTER
    }) else {
        panic!("a server silent DOWN_AFTER after it was added stays up");
    };
    assert!(matches!(change, Change::Down { server, .. } if server == S[3]));
}

/// A new leader credits the old one's silence: a server it never heard (the old leader,
/// dead) goes down `DOWN_AFTER - LEADER_LEASE` after the election, not `DOWN_AFTER`; one it
/// heard, or one added after the election, still gets `DOWN_AFTER` from then.
#[test]
fn a_new_leader_credits_the_old_leaders_silence() {
    let m = four();
    let since = Instant::now() + Duration::from_secs(10);
    let credit = myriad_membership::LEADER_LEASE;
    assert!(credit < DOWN_AFTER);
    let live = since + DOWN_AFTER;
    // Server 2 never heard by this leader; 3 and 4 heard just now.
    let heard = |id: NodeId| (id == S[2] || id == S[3]).then_some(live);
    let listed = |_| since;
    let due = since + DOWN_AFTER - credit;
    let before = due - Duration::from_millis(100);
    assert_eq!(
        detect(&m, S[0], (since, before), heard, listed, |_| DOWN_AFTER),
        None
    );
    let Some((_, change)) = detect(
        &m,
        S[0],
        (since, due + Duration::from_millis(100)),
        heard,
        listed,
        |_| DOWN_AFTER,
    ) else {
        panic!("the old leader, never heard, is not marked down after the credit");
    };
    assert!(matches!(change, Change::Down { server, .. } if server == S[1]));
    // Heard by this leader just after its election: DOWN_AFTER from then, no credit.
    let heard_once = |id: NodeId| Some(if id == S[1] { since } else { live });
    assert_eq!(
        detect(
            &m,
            S[0],
            (since, due + Duration::from_millis(100)),
            heard_once,
            listed,
            |_| DOWN_AFTER,
        ),
        None
    );
    // Added to the map after the election: DOWN_AFTER from its listing.
    let added = since + Duration::from_millis(500);
    let listed_late = |id: NodeId| if id == S[1] { added } else { since };
    assert_eq!(
        detect(
            &m,
            S[0],
            (since, added + DOWN_AFTER - Duration::from_millis(100)),
            heard,
            listed_late,
            |_| DOWN_AFTER,
        ),
        None
    );
}

#[test]
fn copies_move_off_a_server_only_after_its_grace() {
    let m = four()
        .mark_down(S[2])
        .unwrap_or_else(|| panic!("server 3 is up"));
    let since = Instant::now();
    let heard = |id: NodeId| (id == S[2]).then_some(since + Duration::from_secs(1));
    let grace = Duration::from_secs(60);
    let at = |secs| (since, since + Duration::from_secs(secs));
    assert!(past_grace(&m, at(30), grace, heard).is_empty());
    assert_eq!(past_grace(&m, at(62), grace, heard), BTreeSet::from([S[2]]));
    // An up server is never past grace, however long ago it was heard.
    assert!(past_grace(&four(), at(600), grace, |_| None).is_empty());
    // A server removed gone for good (leaving, silent past the grace) need not be asked
    // about its fragments; a leaving one heard lately (a drain) is.
    let removed = m
        .mark_leaving(S[2])
        .unwrap_or_else(|| panic!("server 3 may leave"));
    let leaving = |at| silent_past_grace(&removed, NodeState::Leaving, at, grace, heard);
    assert!(leaving(at(30)).is_empty());
    assert_eq!(leaving(at(62)), BTreeSet::from([S[2]]));
}

/// A leader that was itself paused (SIGSTOP: issue 48's CI run) heard nobody meanwhile:
/// judged from the resumption, no server goes down for the leader's pause, and one that
/// stays silent after it still does.
#[test]
fn a_paused_leader_judges_silence_from_its_resumption() {
    let m = four();
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    let heard = |_: NodeId| Some(at(1.0));
    // A sleep of 100 ms from 1.0 s woke at 3.5 s: the pause is noticed.
    let nap = Duration::from_millis(100);
    assert_eq!(
        paused(at(1.0), nap, at(3.5)),
        Some(Duration::from_millis(2400))
    );
    assert!(
        paused(at(1.0), nap, at(1.3)).is_none(),
        "a wake-up late by load is no pause"
    );
    // Judged from the leadership's start, everyone looks silent for 2.5 s.
    assert!(detect(&m, S[0], (t0, at(3.5)), heard, |_| t0, |_| DOWN_AFTER).is_some());
    // Judged afresh from the resumption: nobody goes down...
    let since = at(3.5);
    assert!(detect(&m, S[0], (since, at(3.5)), heard, |_| since, |_| DOWN_AFTER).is_none());
    // ...until a server stays silent for DOWN_AFTER after the credit a new leader gives.
    let later = since + DOWN_AFTER;
    let heard_after = |id: NodeId| Some(if id == S[2] { at(1.0) } else { later });
    let Some((_, Change::Down { server, .. })) = detect(
        &m,
        S[0],
        (since, later),
        heard_after,
        |_| since,
        |_| DOWN_AFTER,
    ) else {
        panic!("the silent server goes down in the end")
    };
    assert_eq!(server, S[2]);
}

/// A server that marks itself down to stop (`hand_over`) was heard just before: the
/// leader does not take that as its return, only a request after it saw it down.
#[tokio::test(start_paused = true)]
async fn a_server_seen_down_is_back_only_when_heard_after() {
    let heard = Heard::default();
    let m = four();
    heard.note(S[1]);
    assert!(heard.since_down(S[1]).is_some(), "up: as heard");
    tokio::time::advance(Duration::from_millis(100)).await;
    let down = m.mark_down(S[1]).unwrap_or_else(|| panic!("up"));
    heard.saw_down(&down, Instant::now());
    assert_eq!(
        heard.since_down(S[1]),
        None,
        "heard before it was seen down"
    );
    let since = Instant::now();
    let round = |now| {
        detect(
            &down,
            S[0],
            (since, now),
            |id| heard.since_down(id),
            |_| since,
            |_| DOWN_AFTER,
        )
    };
    assert!(
        round(Instant::now()).is_none(),
        "not marked up again at once"
    );
    tokio::time::advance(Duration::from_millis(250)).await;
    heard.note(S[1]);
    assert!(heard.since_down(S[1]).is_some());
    let now = Instant::now();
    assert!(matches!(
        round(now),
        Some((_, Change::Up { server })) if server == S[1]
    ));
    // Marked up: forgotten as down.
    let up = down.mark_up(S[1]).unwrap_or_else(|| panic!("down"));
    heard.saw_down(&up, now);
    assert!(heard.since_down(S[1]).is_some());
}

/// The pause watch sees this process stand still (its runtime blocked), and not a task
/// that merely waits long (a leader's round waiting out a silent server's timeouts, which
/// it once took for a pause, again and again, so that the server was never marked down).
#[tokio::test(flavor = "current_thread")]
async fn a_blocked_process_is_a_pause_and_a_long_wait_is_not() {
    let m = Arc::new(Pauses::default());
    let watch = {
        let m = m.clone();
        tokio::spawn(async move { m.watch().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let start = Instant::now();
    tokio::time::sleep(DOWN_AFTER).await;
    assert_eq!(m.ended_after(start), None, "waiting is no pause");
    let before = Instant::now();
    // A stand-in for SIGSTOP: the only runtime thread stands still.
    std::thread::sleep(DOWN_AFTER);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let long = m
        .ended_after(before)
        .unwrap_or_else(|| panic!("the blocked runtime was not noticed"));
    assert!(long > DOWN_AFTER / 2, "{long:?}");
    watch.abort();
}

/// Primaries are handed over for balance only by a leader that has led for the settling
/// time, past it since the last return, with every server up heard lately.
#[test]
fn balance_waits_for_a_settled_leader_and_every_server_heard() {
    let m = four();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let settle = HANDOVER_SETTLE.as_secs();
    let all_heard_at = |s: u64| move |_: NodeId| Some(at(s));
    let later = settle + 10;
    assert!(may_balance(
        &m,
        S[0],
        (t0, at(later)),
        None,
        all_heard_at(later)
    ));
    assert!(
        !may_balance(&m, S[0], (t0, at(5)), None, all_heard_at(5)),
        "a leader elected 5 s ago balanced (a rolling restart's new leader)"
    );
    assert!(
        !may_balance(
            &m,
            S[0],
            (t0, at(later)),
            Some(at(later - 5)),
            all_heard_at(later)
        ),
        "balanced 5 s after a return"
    );
    let one_quiet = |id: NodeId| Some(if id == S[2] { at(later - 2) } else { at(later) });
    assert!(
        !may_balance(&m, S[0], (t0, at(later)), None, one_quiet),
        "balanced while a server up was quiet for 2 s"
    );
    let only_me_quiet = |id: NodeId| Some(if id == S[0] { at(0) } else { at(later) });
    assert!(may_balance(&m, S[0], (t0, at(later)), None, only_me_quiet));
}

/// Issue 49: a server whose lease requests came slowly while it was alive (a starved
/// host) is given twice its longest recent gap before it is marked down, at most
/// `DOWN_AFTER_MAX`; an absence (a gap that was already past its allowance) does not
/// count, and the memory of slowness fades after `SLOW_REMEMBERED`.
#[test]
fn a_server_shown_slow_is_given_time_and_a_dead_one_is_not() {
    let t0 = Instant::now();
    let at = |s: f64| t0 + Duration::from_secs_f64(s);
    let mut p = Patience::default();
    assert_eq!(p.allowed(t0), DOWN_AFTER, "nothing heard yet");
    // Regular requests: the allowance stays DOWN_AFTER (a dead server goes down in time).
    for i in 1..20 {
        p.gap(at(f64::from(i) * 0.25), Duration::from_millis(250));
    }
    assert_eq!(p.allowed(at(5.0)), DOWN_AFTER);
    // A gap of 1.8 s, survived: a silence up to 3.6 s is allowed now.
    p.gap(at(7.0), Duration::from_millis(1800));
    assert_eq!(p.allowed(at(7.5)), Duration::from_millis(3600));
    let m = four();
    let since = at(10.0);
    let heard = |id: NodeId| Some(if id == S[2] { at(10.0) } else { at(13.2) });
    let allowed = |id: NodeId| {
        if id == S[2] {
            p.allowed(at(13.2))
        } else {
            DOWN_AFTER
        }
    };
    assert_eq!(
        detect(&m, S[0], (since, at(13.2)), heard, |_| since, allowed),
        None,
        "3.2 s of silence from a server shown slow is allowed"
    );
    let heard = |id: NodeId| Some(if id == S[2] { at(10.0) } else { at(13.8) });
    let Some((_, Change::Down { server, .. })) =
        detect(&m, S[0], (since, at(13.8)), heard, |_| since, allowed)
    else {
        panic!("3.8 s of silence is past the allowance")
    };
    assert_eq!(server, S[2]);
    // Gaps are capped; a gap past the allowance (it was down) is no evidence of slowness.
    p.gap(at(8.0), Duration::from_millis(3500));
    assert_eq!(p.allowed(at(8.5)), Duration::from_millis(7000));
    p.gap(at(9.0), Duration::from_secs(30));
    assert_eq!(p.allowed(at(9.5)), Duration::from_millis(7000));
    p.gap(at(9.6), Duration::from_millis(5000));
    assert_eq!(p.allowed(at(9.7)), DOWN_AFTER_MAX, "at most DOWN_AFTER_MAX");
    // Two windows later with only regular requests, it is DOWN_AFTER again.
    let later = 9.7 + 2.0 * SLOW_REMEMBERED.as_secs_f64();
    p.gap(at(later), Duration::from_millis(250));
    assert_eq!(p.allowed(at(later + 1.0)), DOWN_AFTER);
    let mut fresh = Patience::default();
    fresh.gap(at(1.0), Duration::from_secs(60));
    assert_eq!(
        fresh.allowed(at(1.0)),
        DOWN_AFTER,
        "a restart's absence is not slowness"
    );
}
