//! The pure part of a partition: executing a mutation on a store (`mutation`, and its
//! families), the records of two-node operations (`intent`), and the POSIX permission rules
//! (`perm`). Names only the storage and protocol crates: no tasks, no network, no clock of
//! its own (times come in with the mutation).

mod attrs;
pub(crate) mod changed_dirs;
mod coded;
mod data;
mod dirs;
pub(crate) mod failure;
mod files;
pub(crate) mod ids;
pub(crate) mod intent;
mod link_mutations;
pub(crate) mod lock_marks;
pub(crate) mod mutation;
mod ops;
mod outcome_index;
pub(crate) mod outcome_kinds;
pub(crate) mod outcomes;
pub(crate) mod perm;
mod records;
mod renames;
mod split_mutations;
