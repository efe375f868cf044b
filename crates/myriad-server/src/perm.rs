//! POSIX permission rules, as pure functions of an inode and the caller. The basic rule
//! (`allowed`) lives in `myriad_proto::access`, shared with the FUSE mount.

pub use myriad_proto::access::{EXEC, READ, WRITE, allowed};
use myriad_proto::{Caller, FsError, Inode, SetAttr};

/// Sticky bit: in such a directory only the owner of an entry, the directory's owner or root
/// may remove or rename the entry.
pub const STICKY: u32 = 0o1000;

pub fn require(inode: &Inode, caller: &Caller, want: u32) -> Result<(), FsError> {
    if allowed(inode, caller, want) {
        Ok(())
    } else {
        Err(FsError::PermissionDenied)
    }
}

/// Removing or renaming `victim` out of directory `dir`: the sticky-bit rule.
pub fn require_sticky(dir: &Inode, victim: &Inode, caller: &Caller) -> Result<(), FsError> {
    if dir.mode & STICKY == 0
        || caller.uid == 0
        || caller.uid == victim.uid
        || caller.uid == dir.uid
    {
        Ok(())
    } else {
        Err(FsError::PermissionDenied)
    }
}

/// Who may change which attribute (chmod, chown, utimens).
pub fn require_setattr(inode: &Inode, caller: &Caller, set: &SetAttr) -> Result<(), FsError> {
    if caller.uid == 0 {
        return Ok(());
    }
    let owner = caller.uid == inode.uid;
    if set.mode.is_some() && !owner {
        return Err(FsError::PermissionDenied);
    }
    if set.uid.is_some_and(|u| u != inode.uid) {
        return Err(FsError::PermissionDenied); // only root gives files away
    }
    if let Some(g) = set.gid
        && g != inode.gid
        && !(owner && caller.in_group(g))
    {
        return Err(FsError::PermissionDenied);
    }
    if (set.atime_ns.is_some() || set.mtime_ns.is_some()) && !owner {
        return Err(FsError::PermissionDenied);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use myriad_proto::FileKind;

    use super::*;

    fn inode(mode: u32, uid: u32, gid: u32) -> Inode {
        Inode {
            ino: 9,
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
            Err(FsError::PermissionDenied)
        );
        assert!(require_sticky(&tmp, &mine, &caller(0, 0, &[])).is_ok());
        assert!(require_sticky(&inode(0o777, 0, 0), &mine, &caller(11, 11, &[])).is_ok());
    }

    #[test]
    fn setattr_rules() {
        let f = inode(0o644, 10, 20);
        let owner = caller(10, 20, &[30]);
        let other = caller(11, 20, &[]);
        let chmod = SetAttr {
            mode: Some(0o600),
            ..SetAttr::default()
        };
        assert!(require_setattr(&f, &owner, &chmod).is_ok());
        assert!(require_setattr(&f, &other, &chmod).is_err());
        let give = SetAttr {
            uid: Some(11),
            ..SetAttr::default()
        };
        assert!(require_setattr(&f, &owner, &give).is_err());
        assert!(require_setattr(&f, &caller(0, 0, &[]), &give).is_ok());
        let to_member_group = SetAttr {
            gid: Some(30),
            ..SetAttr::default()
        };
        assert!(require_setattr(&f, &owner, &to_member_group).is_ok());
        let to_foreign_group = SetAttr {
            gid: Some(31),
            ..SetAttr::default()
        };
        assert!(require_setattr(&f, &owner, &to_foreign_group).is_err());
        let touch = SetAttr {
            mtime_ns: Some(5),
            ..SetAttr::default()
        };
        assert!(require_setattr(&f, &other, &touch).is_err());
    }
}
