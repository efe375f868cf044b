//! What a mutation's `Outcome` is made of, read out in one place per kind (as a request's
//! reply is in `myriad-proto`'s `reply.rs`): a caller of the applier names the kind it
//! expects (`Applier::run_for`, `Partition::begin`) instead of matching `Outcome` with a
//! "that was not the outcome I expected" arm of its own.

use crate::state::failure::StateError;
use myriad_proto::{Inode, InodeId, WireError};

use crate::state::ops::{Blocks, Outcome};

/// A kind of outcome some mutations have.
pub(crate) trait OutcomeKind: Sized {
    /// What it is, for the error when a mutation had another.
    const WHAT: &'static str;
    fn take(o: Outcome) -> Option<Self>;
}

/// `o` as a `K`; an internal error naming both if it is not one.
pub(crate) fn expect<K: OutcomeKind>(o: Outcome) -> Result<K, StateError> {
    let had = outcome_name(&o);
    K::take(o).ok_or_else(|| {
        WireError::Io(format!(
            "a mutation's outcome was {had}, where {} was expected",
            K::WHAT
        ))
        .into()
    })
}

fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Unit => "nothing",
        Outcome::Ledger(_) => "a quota's allowance",
        Outcome::Ids(..) => "ids",
        Outcome::Resynced(_) => "a resync",
        Outcome::Touched(_) => "touches",
        Outcome::Inode(_) => "an inode",
        Outcome::Created(_) => "a new inode",
        Outcome::InodeGc(..) => "an inode and a trim",
        Outcome::Gc(_) => "a trim",
        Outcome::Gcs(_) => "trims",
        Outcome::Begun { .. } => "an intent begun",
        Outcome::TreeMoveBegun { .. } => "a tree move begun",
        Outcome::RenameBegun { .. } => "a rename begun",
        Outcome::Renamed(..) => "a rename",
        Outcome::Exchanged(..) => "an exchange",
        Outcome::SplitBegun { .. } => "a split begun",
        Outcome::Coded(_) => "a coded chunk",
        Outcome::Switched(_) => "a coding switch",
        Outcome::DroppedCoded(_) => "dropped coded chunks",
    }
}

/// A kind that is one shape of `Outcome`: `outcome_kind!(Type, "what", pattern => value)`.
macro_rules! outcome_kind {
    ($ty:ty, $what:literal, $pat:pat => $val:expr) => {
        impl OutcomeKind for $ty {
            const WHAT: &'static str = $what;
            fn take(o: Outcome) -> Option<Self> {
                match o {
                    $pat => Some($val),
                    _ => None,
                }
            }
        }
    };
}

/// A quota's allowance held by the partition after the change (`QuotaAllow`, `QuotaSettle`).
pub(crate) struct Held(pub myriad_storage::Allowance);

outcome_kind!(Held, "a quota's allowance", Outcome::Ledger(l) => Held(myriad_storage::Allowance::of(l)));

// The inode after a change of it (a chunk trim it may have left is not wanted).
outcome_kind!(Inode, "an inode", Outcome::Inode(i) | Outcome::InodeGc(i, _) => i);

/// A name made (`CreateFile`, a node of an entry): a new inode, or the one already there
/// (a create that is not exclusive opens it).
pub(crate) enum NameMade {
    New(Inode),
    Existing(Inode),
}

impl OutcomeKind for NameMade {
    const WHAT: &'static str = "an inode made or found";
    fn take(o: Outcome) -> Option<Self> {
        match o {
            Outcome::Created(i) => Some(NameMade::New(i)),
            Outcome::Inode(i) | Outcome::InodeGc(i, _) => Some(NameMade::Existing(i)),
            _ => None,
        }
    }
}

impl NameMade {
    pub(crate) fn inode(self) -> Inode {
        match self {
            NameMade::New(i) | NameMade::Existing(i) => i,
        }
    }
}

/// The inode after a cut, and the chunk trim intent to run (if any) before answering.
pub(crate) struct Trimmed {
    pub(crate) inode: Inode,
    pub(crate) trim: Option<u64>,
}

outcome_kind!(Trimmed, "an inode and its trim",
    Outcome::InodeGc(inode, trim)
        => Trimmed { inode, trim });

/// A change of an inode that may instead have freed it: its attributes after, or the
/// chunk trim intent of the file it freed.
pub(crate) enum InodeOrFreed {
    Inode(Inode),
    Freed(Option<u64>),
}

impl OutcomeKind for InodeOrFreed {
    const WHAT: &'static str = "an inode, or a file freed";
    fn take(o: Outcome) -> Option<Self> {
        match o {
            Outcome::Inode(i) | Outcome::InodeGc(i, _) => Some(InodeOrFreed::Inode(i)),
            Outcome::Gc(trim) => Some(InodeOrFreed::Freed(trim)),
            _ => None,
        }
    }
}

/// Inode numbers reserved: `count` from `first` on.
pub(crate) struct Ids {
    pub(crate) first: u64,
    pub(crate) count: u32,
}

outcome_kind!(Ids, "ids", Outcome::Ids(first, count) => Ids { first, count });

/// Per directory touched, its attributes after (`None`: nothing changed).
pub(crate) struct Touched(pub(crate) Vec<Option<Inode>>);

outcome_kind!(Touched, "touches", Outcome::Touched(t) => Touched(t));

/// The first step of an operation spanning partitions: its intent's txid.
pub(crate) trait Began: OutcomeKind {
    fn txid(&self) -> u64;
}

/// A mkdir's or an rmdir's intent, with the directory's inode.
pub(crate) struct Begun {
    pub(crate) txid: u64,
    pub(crate) inode: Inode,
}

outcome_kind!(Begun, "an intent begun", Outcome::Begun { txid, inode } => Begun { txid, inode });

/// A rename's source side begun: the source's inode and its chunk-0 blocks.
pub(crate) struct RenameBegun {
    pub(crate) txid: u64,
    pub(crate) inode: Inode,
    pub(crate) blocks: Blocks,
}

impl OutcomeKind for RenameBegun {
    const WHAT: &'static str = "a rename begun";
    fn take(o: Outcome) -> Option<Self> {
        match o {
            Outcome::RenameBegun {
                txid,
                inode,
                blocks,
            } => Some(RenameBegun {
                txid,
                inode,
                blocks,
            }),
            _ => None,
        }
    }
}

/// A shard split begun: the directory's inode number.
pub(crate) struct SplitBegun {
    pub(crate) txid: u64,
    pub(crate) ino: InodeId,
}

outcome_kind!(SplitBegun, "a split begun",
    Outcome::SplitBegun { txid, ino }
        => SplitBegun { txid, ino });

/// A tree move begun.
pub(crate) struct TreeMoveBegun {
    pub(crate) txid: u64,
}

outcome_kind!(TreeMoveBegun, "a tree move begun",
    Outcome::TreeMoveBegun { txid }
        => TreeMoveBegun { txid });

/// Each kind of intent begun gives its txid.
macro_rules! began {
    ($($ty:ty),*) => {
        $(impl Began for $ty {
            fn txid(&self) -> u64 {
                self.txid
            }
        })*
    };
}

began!(Begun, RenameBegun, SplitBegun, TreeMoveBegun);

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(n: u64) -> Inode {
        Inode::new(InodeId(n), myriad_proto::FileKind::File, 0o644, (0, 0), 1)
    }

    #[test]
    fn an_outcome_of_another_kind_is_an_error_naming_both() {
        let e = expect::<Trimmed>(Outcome::Ids(5, 2)).err();
        let Some(StateError::Fs(WireError::Io(m))) = e else {
            panic!("not refused: {e:?}");
        };
        assert!(
            m.contains("ids") && m.contains("an inode and its trim"),
            "{m}"
        );
        let ok = expect::<Trimmed>(Outcome::InodeGc(inode(3), Some(9)));
        assert!(matches!(ok, Ok(Trimmed { trim: Some(9), .. })));
    }

    #[test]
    fn a_name_made_tells_a_new_inode_from_one_found() {
        assert!(matches!(
            expect::<NameMade>(Outcome::Created(inode(4))),
            Ok(NameMade::New(i)) if i.ino == InodeId(4)
        ));
        assert!(matches!(
            expect::<NameMade>(Outcome::Inode(inode(4))),
            Ok(NameMade::Existing(_))
        ));
        assert!(expect::<NameMade>(Outcome::Gc(None)).is_err());
    }

    #[test]
    fn a_begun_intent_gives_its_txid_whatever_its_kind() {
        let b = expect::<SplitBegun>(Outcome::SplitBegun {
            txid: 77,
            ino: InodeId(2),
        });
        assert_eq!(b.map(|b| b.txid()).ok(), Some(77));
        assert!(expect::<Begun>(Outcome::TreeMoveBegun { txid: 1 }).is_err());
    }
}
