//! Kernel inode numbers and Myriad inode ids. They are the same numbers (`inodes.rs`),
//! except in a mount of a subdirectory (`mount h1:7401:/projects/a /mnt`): the kernel's
//! root is always inode 1 (FUSE_ROOT_ID), so that directory is shown as 1, and the
//! cluster's root, which is never inside it, takes the directory's number. A swap of two
//! numbers is its own inverse, so one function converts both ways and no two inodes ever
//! share a kernel number.

use fuser::INodeNo;
use myriad_proto::{InodeId, ROOT_INO};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelIds {
    /// The Myriad inode the kernel's root shows.
    top: InodeId,
}

impl KernelIds {
    /// A mount whose root is the directory `top` (`ROOT_INO`: the whole file system).
    pub fn with_top(top: InodeId) -> KernelIds {
        KernelIds { top }
    }

    fn swap(self, n: u64) -> u64 {
        if n == self.top.0 {
            ROOT_INO.0
        } else if n == ROOT_INO.0 {
            self.top.0
        } else {
            n
        }
    }

    /// The Myriad inode a kernel request names.
    pub fn id(self, ino: INodeNo) -> InodeId {
        InodeId(self.swap(ino.0))
    }

    /// The number the kernel knows a Myriad inode by.
    pub fn ino(self, id: InodeId) -> INodeNo {
        INodeNo(self.swap(id.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_mount_keeps_numbers_and_a_subdirectory_swaps_with_the_root() {
        let whole = KernelIds::with_top(ROOT_INO);
        for n in [1, 2, 77, u64::MAX] {
            assert_eq!(whole.id(INodeNo(n)), InodeId(n));
            assert_eq!(whole.ino(InodeId(n)), INodeNo(n));
        }
        let sub = KernelIds::with_top(InodeId(77));
        assert_eq!(
            sub.id(INodeNo(1)),
            InodeId(77),
            "the kernel's root is the top"
        );
        assert_eq!(sub.ino(InodeId(77)), INodeNo(1));
        assert_eq!(
            sub.ino(ROOT_INO),
            INodeNo(77),
            "the real root is out of the way"
        );
        assert_eq!(sub.id(INodeNo(77)), ROOT_INO);
        for n in [2, 76, 78, u64::MAX] {
            assert_eq!(sub.id(INodeNo(n)), InodeId(n));
            assert_eq!(sub.ino(sub.id(INodeNo(n))), INodeNo(n), "round trip");
        }
    }
}
