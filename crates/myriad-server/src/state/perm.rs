//! POSIX permission rules, as pure functions of an inode and the caller. The basic rule
//! (`allowed`) lives in `myriad_proto::access`, shared with the FUSE mount.

pub use myriad_proto::access::{
    EXEC, READ, SETGID, SETUID, STICKY, WRITE, allowed, check_setattr, new_owner_group,
    require_sticky, require_write, setid_bits_killed, without_unchanged_access,
};

const GROUP_EXEC: u32 = 0o010;
use crate::state::failure::StateError;
use myriad_proto::{Caller, FileKind, Inode, WireError};

pub fn require(inode: &Inode, caller: &Caller, want: u32) -> Result<(), StateError> {
    if allowed(inode, caller, want) {
        Ok(())
    } else {
        Err(WireError::PermissionDenied.into())
    }
}

/// Giving `source` another name (Linux `fs.protected_hardlinks`, on by default): its owner
/// or root may; anyone else only for a regular file without set-user-id (or executable
/// set-group-id) that they may both read and write.
pub fn may_link(source: &Inode, caller: &Caller) -> Result<(), StateError> {
    if caller.uid == 0 || caller.uid == source.uid {
        return Ok(());
    }
    let setid =
        source.mode & SETUID != 0 || source.mode & (SETGID | GROUP_EXEC) == SETGID | GROUP_EXEC;
    if source.kind == FileKind::File && !setid && allowed(source, caller, READ | WRITE) {
        Ok(())
    } else {
        Err(WireError::NotPermitted.into())
    }
}

#[cfg(test)]
mod tests {
    use myriad_proto::{FileKind, FsError};

    use super::*;
    use myriad_proto::InodeId;
    use myriad_proto::SetAttr;
    use myriad_proto::access::mode_after_chown;

    fn inode(mode: u32, uid: u32, gid: u32) -> Inode {
        Inode {
            ino: InodeId(9),
            kind: FileKind::Directory,
            mode,
            uid,
            gid,
            size: 0,
            nlink: 2,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            symlink_target: None,
            xattrs: Vec::new(),
            link_home: None,
            rdev: 0,
        }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn owner_group_other_classes_are_exclusive() {
        let i = inode(0o604, 10, 20);
        assert!(allowed(&i, &caller(10, 99, &[]), READ | WRITE));
        assert!(!allowed(&i, &caller(10, 99, &[]), EXEC));
        // group class has no bits: a member is denied even though "other" could read
        assert!(!allowed(&i, &caller(11, 20, &[]), READ));
        assert!(
            !allowed(&i, &caller(11, 5, &[20]), READ),
            "supplementary groups count"
        );
        assert!(allowed(&i, &caller(11, 5, &[]), READ));
        assert!(!allowed(&i, &caller(11, 5, &[]), WRITE));
        assert!(
            allowed(&inode(0, 10, 20), &caller(0, 0, &[]), READ | WRITE | EXEC),
            "root passes"
        );
    }

    #[test]
    fn sticky_directories_protect_other_users_entries() {
        let tmp = inode(0o1777, 0, 0);
        let mine = inode(0o644, 10, 10);
        assert!(require_sticky(&tmp, &mine, &caller(10, 10, &[])).is_ok());
        assert_eq!(
            require_sticky(&tmp, &mine, &caller(11, 11, &[])),
            Err(FsError::NotPermitted),
            "EPERM, as Linux"
        );
        assert!(require_sticky(&tmp, &mine, &caller(0, 0, &[])).is_ok());
        assert!(require_sticky(&inode(0o777, 0, 0), &mine, &caller(11, 11, &[])).is_ok());
    }

    fn set(f: impl FnOnce(&mut SetAttr)) -> SetAttr {
        let mut s = SetAttr::default();
        f(&mut s);
        s
    }

    #[test]
    fn setattr_rules_and_their_errors() {
        let f = inode(0o644, 10, 20);
        let owner = caller(10, 20, &[30]);
        let other = caller(11, 20, &[]);
        let root = caller(0, 0, &[]);
        let eperm = Err(FsError::NotPermitted);
        let chmod = set(|s| s.mode = Some(0o600));
        assert!(check_setattr(&f, &owner, &chmod).is_ok());
        assert_eq!(check_setattr(&f, &other, &chmod), eperm);
        let give = set(|s| s.uid = Some(11));
        assert_eq!(check_setattr(&f, &owner, &give), eperm);
        assert!(check_setattr(&f, &root, &give).is_ok());
        let to_self = set(|s| s.uid = Some(10));
        assert!(check_setattr(&f, &owner, &to_self).is_ok());
        assert_eq!(
            check_setattr(&f, &other, &to_self),
            eperm,
            "a non-owner may not chown even to the current owner"
        );
        assert_eq!(check_setattr(&f, &other, &set(|s| s.gid = Some(20))), eperm);
        assert!(check_setattr(&f, &owner, &set(|s| s.gid = Some(30))).is_ok());
        assert_eq!(check_setattr(&f, &owner, &set(|s| s.gid = Some(31))), eperm);
        assert_eq!(
            check_setattr(&f, &other, &set(|s| s.mtime_ns = Some(5))),
            eperm
        );
        // A touch (both times now): any writer; others EACCES.
        let touch = set(|s| s.touch = true);
        let shared = inode(0o666, 10, 20);
        assert!(check_setattr(&shared, &other, &touch).is_ok());
        assert_eq!(
            check_setattr(&f, &other, &touch),
            Err(FsError::PermissionDenied)
        );
        // A writer may clear set-id bits (the kernel asks it on a write) and nothing else.
        let suid = inode(0o6777, 10, 20);
        assert!(check_setattr(&suid, &other, &set(|s| s.mode = Some(0o777))).is_ok());
        assert!(check_setattr(&suid, &other, &set(|s| s.mode = Some(0o2777))).is_ok());
        assert_eq!(
            check_setattr(&suid, &other, &set(|s| s.mode = Some(0o6775))),
            eperm
        );
        assert_eq!(
            check_setattr(
                &inode(0o6755, 10, 20),
                &other,
                &set(|s| s.mode = Some(0o755))
            ),
            eperm,
            "not without write permission"
        );
        // The owner setting set-group-id on a file of a group it is not in: dropped.
        let g = check_setattr(
            &inode(0o644, 10, 40),
            &owner,
            &set(|s| s.mode = Some(0o2755)),
        );
        assert_eq!(g.map(|s| s.mode), Ok(Some(0o755)));
    }

    #[test]
    fn writes_through_an_open_descriptor_and_new_inodes() {
        let ro = inode(0o000, 10, 20);
        assert!(require_write(&ro, &caller(10, 20, &[]), true).is_ok());
        assert!(require_write(&ro, &caller(10, 20, &[]), false).is_err());
        assert!(require_write(&ro, &caller(11, 20, &[]), true).is_err());
        let with = |mode, kind| Inode {
            kind,
            ..inode(mode, 10, 20)
        };
        let (me, outsider) = (caller(10, 20, &[]), caller(10, 30, &[]));
        assert_eq!(mode_after_chown(&with(0o6755, FileKind::File), &me), 0o755);
        assert_eq!(
            mode_after_chown(&with(0o2745, FileKind::File), &me),
            0o2745,
            "g-x, in the group: kept"
        );
        assert_eq!(
            mode_after_chown(&with(0o2745, FileKind::File), &outsider),
            0o745,
            "g-x, not in the group: dropped"
        );
        assert_eq!(
            mode_after_chown(&with(0o2755, FileKind::Directory), &me),
            0o2755
        );
        assert_eq!(
            setid_bits_killed(&with(0o6755, FileKind::File), &me),
            0o6000
        );
        assert_eq!(
            setid_bits_killed(&with(0o6745, FileKind::File), &me),
            0o4000
        );
        assert_eq!(
            setid_bits_killed(&with(0o6745, FileKind::File), &caller(0, 0, &[])),
            0
        );
        let sgid_dir = inode(0o2775, 0, 50);
        let user = caller(10, 20, &[]);
        assert_eq!(
            new_owner_group(Some(&sgid_dir), &user, FileKind::Directory, 0o755),
            (50, 0o2755)
        );
        assert_eq!(
            new_owner_group(Some(&sgid_dir), &user, FileKind::File, 0o2755),
            (50, 0o755),
            "not in the group: set-group-id dropped"
        );
        assert_eq!(
            new_owner_group(Some(&inode(0o775, 0, 50)), &user, FileKind::File, 0o644),
            (20, 0o644)
        );
    }
}
