//! The POSIX permission rule, as a pure function of an inode and the caller: used by the
//! servers for every check and by the FUSE mount for the few answers it gives itself
//! (`access(2)`, reading extended attributes).
//!
//! Root (uid 0) passes every read, write and search check (CAP_DAC_OVERRIDE) and may
//! execute a file only if someone may; everyone else gets the owner, group or other bits,
//! the first class that matches (not the union).

use crate::{Caller, FileKind, FsError, Inode, SetAttr};

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

/// Who may change which attribute (chmod, chown, utimens), with the errors Linux gives:
/// EPERM for what only the owner (or root) may do, EACCES for a touch without write
/// permission. Returns the change to apply: a set-group-id bit the caller may not set
/// (not in the file's group) is dropped, as Linux does silently.
pub fn check_setattr(inode: &Inode, caller: &Caller, set: &SetAttr) -> Result<SetAttr, FsError> {
    let mut set = set.clone();
    if (set.uid.is_some() || set.gid.is_some()) && set.mode.is_none() {
        // A chown takes set-id bits off a regular file, whoever makes it (Linux).
        let m = mode_after_chown(inode, caller);
        if m != inode.mode & 0o7777 {
            set.mode = Some(m);
        }
    }
    if caller.uid == 0 {
        return Ok(set);
    }
    let owner = caller.uid == inode.uid;
    let may_write = allowed(inode, caller, WRITE);
    if let Some(m) = set.mode {
        let m = m & 0o7777;
        if !(owner || may_write && only_clears_setid(inode.mode, m)) {
            return Err(FsError::NotPermitted);
        }
        let gid = set.gid.unwrap_or(inode.gid);
        if owner && m & SETGID != 0 && !caller.in_group(gid) {
            set.mode = Some(m & !SETGID);
        }
    }
    // Only root gives a file away; not even to its current owner for anyone else.
    if set.uid.is_some_and(|u| u != inode.uid || !owner) {
        return Err(FsError::NotPermitted);
    }
    if let Some(g) = set.gid
        && !(owner && (g == inode.gid || caller.in_group(g)))
    {
        return Err(FsError::NotPermitted);
    }
    if (set.atime_ns.is_some() || set.mtime_ns.is_some()) && !owner {
        return Err(FsError::NotPermitted);
    }
    if set.touch && !owner && !may_write {
        return Err(FsError::PermissionDenied);
    }
    Ok(set)
}

/// `set` (checked by `check_setattr`) without the owner, group and mode it would set to
/// the values `inode` has: what is left changes no one's access (the change still sets
/// ctime, as Linux's chown to the same owner does). `tar -x` as root gives each directory
/// the owner it already has, which then needs none of the steps a change of a
/// directory's access takes (docs/fuse.md "Write-behind").
#[must_use]
pub fn without_unchanged_access(inode: &Inode, mut set: SetAttr) -> SetAttr {
    if set.mode.is_some_and(|m| m & 0o7777 == inode.mode & 0o7777) {
        set.mode = None;
    }
    if set.uid == Some(inode.uid) {
        set.uid = None;
    }
    if set.gid == Some(inode.gid) {
        set.gid = None;
    }
    set
}

/// Whether mode `new` only adds read, write or search bits to `old` (the set-id and
/// sticky bits as they were): a directory's change that refuses nothing it allowed, so
/// nothing answered by its old mode could be refused by the new one.
#[must_use]
pub fn only_widens(old: u32, new: u32) -> bool {
    let (old, new) = (old & 0o7777, new & 0o7777);
    old & !0o777 == new & !0o777 && old & !new == 0
}

/// `new` is `old` without its set-user-id and/or set-group-id bits, and nothing else: what
/// the kernel asks on behalf of a non-owner who writes or truncates such a file (its
/// set-id bits must go, and that writer may not otherwise chmod).
fn only_clears_setid(old: u32, new: u32) -> bool {
    let old = old & 0o7777;
    let cleared = old & !new;
    new & !old == 0 && cleared != 0 && cleared & !(SETUID | SETGID) == 0
}

/// Owner group and mode of a new inode of `kind` made by `caller` in directory `parent`
/// (BSD group semantics under a set-group-id directory, as Linux): it takes the directory's
/// group, a new directory inherits the set-group-id bit, and a new file keeps set-group-id
/// only if its creator is in that group.
#[must_use]
pub fn new_owner_group(
    parent: Option<&Inode>,
    caller: &Caller,
    kind: FileKind,
    mode: u32,
) -> (u32, u32) {
    let mut mode = mode & 0o7777;
    let Some(p) = parent.filter(|p| p.mode & SETGID != 0) else {
        return (caller.gid, mode);
    };
    if kind == FileKind::Directory {
        mode |= SETGID;
    } else if mode & (SETGID | GROUP_EXEC) == SETGID | GROUP_EXEC
        && caller.uid != 0
        && !caller.in_group(p.gid)
    {
        mode &= !SETGID;
    }
    (p.gid, mode)
}

/// Applies a checked `set` (`check_setattr`) to `inode` at time `now`.
pub fn apply_setattr(inode: &mut Inode, set: &SetAttr, now: i64) {
    if let Some(m) = set.mode {
        inode.mode = m & 0o7777;
    }
    if let Some(u) = set.uid {
        inode.uid = u;
    }
    if let Some(g) = set.gid {
        inode.gid = g;
    }
    if let Some(a) = set.atime_ns {
        inode.atime_ns = a;
    }
    if let Some(m) = set.mtime_ns {
        inode.mtime_ns = m;
    }
    if set.touch {
        inode.atime_ns = now;
        inode.mtime_ns = now;
    }
    inode.ctime_ns = now;
}

/// Sticky bit: in such a directory only the owner of an entry, the directory's owner or root
/// may remove or rename the entry.
pub const STICKY: u32 = 0o1000;

/// Removing `victim` from directory `dir`, renaming it away, or renaming another entry
/// over it: the sticky-bit rule (EPERM, as Linux).
pub fn require_sticky(dir: &Inode, victim: &Inode, caller: &Caller) -> Result<(), FsError> {
    if dir.mode & STICKY == 0
        || caller.uid == 0
        || caller.uid == victim.uid
        || caller.uid == dir.uid
    {
        Ok(())
    } else {
        Err(FsError::NotPermitted)
    }
}

/// Writing or truncating a file: write permission, or, through a descriptor whose open
/// checked access (`opened`), ownership: POSIX checks access once, at open, so a file made
/// by open(O_CREAT, 0) is written through that descriptor, and so is one whose owner took
/// the write bit away after opening it.
pub fn require_write(inode: &Inode, caller: &Caller, opened: bool) -> Result<(), FsError> {
    if allowed(inode, caller, WRITE) || (opened && caller.uid == inode.uid) {
        Ok(())
    } else {
        Err(FsError::PermissionDenied)
    }
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
        let same = SetAttr {
            mode: Some(0o100_640),
            uid: Some(10),
            gid: Some(20),
            mtime_ns: Some(7),
            ..SetAttr::default()
        };
        let left = without_unchanged_access(&i, same);
        assert_eq!((left.mode, left.uid, left.gid), (None, None, None));
        assert_eq!(left.mtime_ns, Some(7), "the times stay");
        let other = SetAttr {
            mode: Some(0o644),
            uid: Some(10),
            gid: Some(21),
            ..SetAttr::default()
        };
        let left = without_unchanged_access(&i, other);
        assert_eq!(
            (left.mode, left.uid, left.gid),
            (Some(0o644), None, Some(21))
        );
        assert!(only_widens(0o700, 0o755));
        assert!(only_widens(0o40_700, 0o700));
        assert!(!only_widens(0o755, 0o750), "search taken from others");
        assert!(!only_widens(0o700, 0o2755), "a set-group-id bit added");
        assert!(!only_widens(0o1777, 0o777), "the sticky bit taken");
    }
}
