//! The FUSE kernel channel measured on its own (issue 51, item 2): the classic /dev/fuse
//! `read`/`write` loop against FUSE over io_uring, each serving the same do-nothing file
//! system, so `myriad bench fuse-transport` can report the CPU a kernel request costs over
//! each, with no file system work in the way. The mount's own ring is in fuser
//! (`vendor/fuser`, `myriad mount --fuse-ring`; docs/fuse.md "FUSE over io_uring").
//!
//! Layout: `abi` (the protocol's bytes) <- `probe_fs` (the answers) <- `device`, `ring`
//! (the two channels) <- `probe` (mount, callers, counters).

pub mod abi;
pub mod device;
pub mod probe;
pub mod probe_fs;
pub mod ring;

pub use probe::{Op, Sample, Transport, measure};
