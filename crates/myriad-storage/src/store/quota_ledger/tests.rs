use std::sync::Arc;

use super::*;
use crate::mem_kv::MemKv;

fn store() -> Store {
    Store::open(Arc::new(MemKv::new()), 1).unwrap_or_else(|e| panic!("{e}"))
}

fn commit(s: &Store, f: impl FnOnce(&Store, &mut Batch)) {
    let mut b = Batch::new();
    f(s, &mut b);
    s.commit(b).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn an_allowance_is_adopted_only_when_newer_and_a_settle_outranks_both() {
    let s = store();
    let a = |f, b, v| Allowance::of((f, b, v));
    commit(&s, |s, b| {
        let held = s
            .adopt_allowance(b, 7, a(64, 100, 2))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held, a(64, 100, 2));
    });
    // A grant delayed in the network, older than what is held: ignored.
    commit(&s, |s, b| {
        let held = s
            .adopt_allowance(b, 7, a(10, 10, 1))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held, a(64, 100, 2));
        assert!(b.ops.is_empty());
    });
    // Settled with no usage: everything given back, at a version above both.
    commit(&s, |s, b| {
        s.put_quota_usage(b, 7, &QuotaUsage { files: 3, bytes: 9 });
    });
    commit(&s, |s, b| {
        let held = s
            .settle_allowance(b, 7, a(128, 100, 5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held, a(3, 9, 6));
        assert!(Store::changes_allowances(b));
    });
    // The grant of version 5 arriving now changes nothing.
    commit(&s, |s, b| {
        let held = s
            .adopt_allowance(b, 7, a(128, 100, 5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(held, a(3, 9, 6));
    });
    assert_eq!(s.quota_allowance(8).ok(), Some(Allowance::default()));
}

#[test]
fn a_ledger_lists_every_partition_s_entry_of_its_quota_only() {
    let s = store();
    commit(&s, |s, b| {
        s.put_quota_ledger(b, 7, 1, &Allowance::of((1, 2, 3)));
        s.put_quota_ledger(b, 7, 300, &Allowance::of((4, 5, 6)));
        s.put_quota_ledger(b, 8, 1, &Allowance::of((9, 9, 9)));
    });
    let l = s.quota_ledger(7).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        l,
        vec![
            (1, Allowance::of((1, 2, 3))),
            (300, Allowance::of((4, 5, 6)))
        ]
    );
}

#[test]
fn only_limited_kinds_are_short() {
    let q = |max_files, max_bytes| QuotaRoot {
        id: 1,
        path: "/q".into(),
        max_files,
        max_bytes,
        trash_apart: false,
    };
    let used = QuotaUsage {
        files: 5,
        bytes: 50,
    };
    let allow = Allowance::of((4, 10, 1));
    assert!(short_of(&q(10, 0), &used, &allow), "names over");
    assert!(short_of(&q(0, 10), &used, &allow), "bytes over");
    assert!(!short_of(&q(0, 0), &used, &allow), "no limit");
    assert!(!short_of(
        &q(10, 0),
        &QuotaUsage {
            files: 4,
            bytes: 50
        },
        &allow
    ));
}
