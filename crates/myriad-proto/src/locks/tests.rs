//! The lock rules against a byte-by-byte model: every byte of a small file knows which
//! owners hold it and how; the ranges must say the same after any sequence of requests.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const BYTES: u64 = 24;

fn owner(n: u8) -> LockOwner {
    LockOwner {
        holder: u64::from(n % 2),
        owner: u64::from(n / 2),
    }
}

/// Per byte: owner -> write? The last cell stands for every byte from `BYTES` on.
type Model = Vec<BTreeMap<LockOwner, bool>>;

fn model_conflict(m: &Model, o: LockOwner, s: u64, e: u64, kind: LockKind) -> bool {
    if kind == LockKind::Unlock {
        return false;
    }
    (s..=e.min(BYTES)).any(|b| {
        m[b as usize]
            .iter()
            .any(|(x, w)| *x != o && (*w || kind == LockKind::Write))
    })
}

fn covered(l: &InodeLocks, b: u64) -> BTreeMap<LockOwner, bool> {
    let mut out = BTreeMap::new();
    for h in l.iter() {
        if h.start <= b && b <= h.end {
            assert!(
                out.insert(h.owner, h.write).is_none(),
                "owner {:?} holds byte {b} twice: {l:?}",
                h.owner
            );
        }
    }
    out
}

fn kind_of(k: u8) -> LockKind {
    match k % 3 {
        0 => LockKind::Read,
        1 => LockKind::Write,
        _ => LockKind::Unlock,
    }
}

proptest! {
    #[test]
    fn ranges_follow_the_byte_model(
        ops in proptest::collection::vec((0u8..4, 0u64..BYTES, 0u64..BYTES + 2, 0u8..3), 1..40)
    ) {
        let mut locks = InodeLocks::default();
        let mut model: Model = vec![BTreeMap::new(); BYTES as usize + 1];
        for (o, s, len, k) in ops {
            let o = owner(o);
            // A length past the file means "to the end of file".
            let e = if s + len >= BYTES { u64::MAX } else { s + len };
            let kind = kind_of(k);
            let conflict = locks.conflict(o, s, e, kind);
            prop_assert_eq!(conflict.is_some(), model_conflict(&model, o, s, e, kind));
            if let Some(c) = conflict {
                prop_assert!(c.owner != o && c.start <= e && s <= c.end);
                continue;
            }
            locks.set(o, s, e, kind, 7);
            for b in s..=e.min(BYTES) {
                match kind {
                    LockKind::Unlock => { model[b as usize].remove(&o); }
                    k => { model[b as usize].insert(o, k == LockKind::Write); }
                }
            }
            for b in 0..=BYTES {
                prop_assert_eq!(&covered(&locks, b), &model[b as usize], "byte {}", b);
            }
            // One owner's locks of one kind never touch: they would have merged.
            for a in locks.iter() {
                for b in locks.iter() {
                    if a != b && a.owner == b.owner && a.write == b.write {
                        prop_assert!(
                            a.end.saturating_add(1) < b.start || b.end.saturating_add(1) < a.start,
                            "unmerged {:?} {:?}", a, b
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_write_lock_splits_a_read_lock_of_the_same_owner() {
    let o = owner(0);
    let mut l = InodeLocks::default();
    l.set(o, 0, u64::MAX, LockKind::Read, 1);
    l.set(o, 10, 19, LockKind::Write, 1);
    let got: Vec<(u64, u64, bool)> = l.iter().map(|h| (h.start, h.end, h.write)).collect();
    assert_eq!(
        got,
        vec![(0, 9, false), (10, 19, true), (20, u64::MAX, false)]
    );
    // Another owner may read outside the written range, not inside it.
    assert!(l.conflict(owner(1), 0, 9, LockKind::Read).is_none());
    assert!(l.conflict(owner(1), 15, 15, LockKind::Read).is_some());
    assert!(l.conflict(owner(1), 0, 0, LockKind::Write).is_some());
    l.set(o, 0, u64::MAX, LockKind::Unlock, 1);
    assert!(l.is_empty());
}

#[test]
fn dropping_a_holder_drops_all_its_owners() {
    let mut l = InodeLocks::default();
    l.set(owner(0), 0, 5, LockKind::Write, 1);
    l.set(owner(2), 10, 15, LockKind::Write, 1);
    l.set(owner(1), 20, 25, LockKind::Write, 1);
    assert_eq!(l.drop_holder(0), 2);
    assert_eq!(l.len(), 1);
    assert!(l.holds(owner(1)));
}
