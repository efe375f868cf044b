//! The POSIX permission rule, for the few answers the mount gives without asking a server
//! (`access(2)`, reading extended attributes that came with a fresh inode). Every change is
//! still checked by the server that applies it.

use myriad_proto::{Caller, Inode};

pub const READ: u32 = 4;
pub const WRITE: u32 = 2;
pub const EXEC: u32 = 1;

pub fn allowed(inode: &Inode, caller: &Caller, want: u32) -> bool {
    if caller.uid == 0 {
        // Root may do anything except execute a file nobody may execute.
        return want & EXEC == 0
            || inode.kind == myriad_proto::FileKind::Directory
            || inode.mode & 0o111 != 0;
    }
    let bits = if caller.uid == inode.uid {
        inode.mode >> 6
    } else if caller.gid == inode.gid || caller.groups.contains(&inode.gid) {
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
            ..crate::ops::placeholder()
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
