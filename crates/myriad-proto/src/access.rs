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
pub const SETUID: u32 = 0o4000;
pub const SETGID: u32 = 0o2000;
const GROUP_EXEC: u32 = 0o010;

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

/// The mode a chown by `caller` leaves: anything but a directory loses set-user-id, and
/// set-group-id where `setid_bits_killed`'s rule takes it (as Linux, root included).
#[must_use]
pub fn mode_after_chown(inode: &Inode, caller: &Caller) -> u32 {
    let mode = inode.mode & 0o7777;
    if inode.kind == FileKind::Directory {
        return mode;
    }
    mode & !SETUID & !(sgid_killed(inode, caller) * SETGID)
}

/// Set-id bits a write or truncate by `caller` takes off `inode` (Linux
/// `setattr_should_drop_suidgid`): none for root (CAP_FSETID) or a non-file; set-user-id
/// always; set-group-id if it marks group execution, or the caller is not in the group.
#[must_use]
pub fn setid_bits_killed(inode: &Inode, caller: &Caller) -> u32 {
    if caller.uid == 0 || inode.kind != FileKind::File {
        return 0;
    }
    (inode.mode & SETUID) | (sgid_killed(inode, caller) * SETGID)
}

/// 1 if a change by `caller` drops the set-group-id bit of `inode` (it has it, and group
/// execution, or a caller outside the group without CAP_FSETID), else 0.
fn sgid_killed(inode: &Inode, caller: &Caller) -> u32 {
    let m = inode.mode;
    u32::from(
        m & SETGID != 0
            && (m & GROUP_EXEC != 0 || (caller.uid != 0 && !caller.in_group(inode.gid))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InodeId;

    #[test]
    fn owner_group_other_and_root() {
        let i = Inode {
            ino: InodeId(5),
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
