//! The POSIX permission rule, as a pure function of an inode and the caller: used by the
//! servers for every check and by the FUSE mount for the few answers it gives itself
//! (`access(2)`, reading extended attributes).
//!
//! Root (uid 0) passes every read, write and search check (CAP_DAC_OVERRIDE) and may
//! execute a file only if someone may; everyone else gets the owner, group or other bits,
//! the first class that matches (not the union).

use crate::{Caller, FileKind, Inode};

pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

/// Whether `caller` has all of `want` (a mask of READ | WRITE | EXEC) on `inode`.
#[must_use]
pub fn allowed(inode: &Inode, caller: &Caller, want: u32) -> bool {
    if caller.uid == 0 {
        return want & EXEC == 0 || inode.kind == FileKind::Directory || inode.mode & 0o111 != 0;
    }
    let bits = if caller.uid == inode.uid {
        inode.mode >> 6
    } else if caller.in_group(inode.gid) {
        inode.mode >> 3
    } else {
        inode.mode
    } & 7;
    bits & want == want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_group_other_and_root() {
        let i = Inode {
            ino: 5,
            mode: 0o640,
            uid: 10,
            gid: 20,
            kind: FileKind::File,
            size: 0,
            nlink: 1,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            symlink_target: None,
            xattrs: Vec::new(),
            link_home: None,
            rdev: 0,
        };
        let who = |uid, gid, groups: Vec<u32>| Caller { uid, gid, groups };
        assert!(allowed(&i, &who(10, 1, vec![]), READ | WRITE));
        assert!(!allowed(&i, &who(10, 1, vec![]), EXEC));
        assert!(allowed(&i, &who(11, 20, vec![]), READ));
        assert!(!allowed(&i, &who(11, 20, vec![]), WRITE));
        assert!(
            allowed(&i, &who(11, 1, vec![20]), READ),
            "supplementary group"
        );
        assert!(!allowed(&i, &who(11, 1, vec![]), READ));
        assert!(allowed(&i, &who(0, 0, vec![]), READ | WRITE));
        assert!(
            !allowed(&i, &who(0, 0, vec![]), EXEC),
            "root cannot run a non-executable"
        );
    }
}
