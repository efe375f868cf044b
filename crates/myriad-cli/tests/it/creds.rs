//! Running system calls as another user from the (root) test process: on a thread of its
//! own whose credentials are switched with raw system calls (glibc's wrappers would switch
//! every thread of the process, the test harness's included).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

#[derive(Clone, Debug)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

pub fn root() -> User {
    User {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    }
}

/// Owner of the test files.
pub fn owner() -> User {
    User {
        uid: 1000,
        gid: 1000,
        groups: Vec::new(),
    }
}

/// Someone else, in no group of the owner's.
pub fn other() -> User {
    User {
        uid: 1001,
        gid: 1001,
        groups: Vec::new(),
    }
}

/// Someone else who is a member of the owner's group (1000) by a supplementary group.
pub fn member() -> User {
    User {
        uid: 1002,
        gid: 1002,
        groups: vec![1000],
    }
}

/// One credential syscall on this thread (raw: glibc's wrappers change every thread).
fn cred(nr: libc::c_long, args: [libc::c_long; 3], what: &str) {
    // SAFETY: credential syscalls take integers, and setgroups an array its caller keeps
    // alive for the call.
    if unsafe { libc::syscall(nr, args[0], args[1], args[2]) } != 0 {
        panic!("{what}: {}", std::io::Error::last_os_error());
    }
}

/// Takes `u`'s credentials on this thread only, groups and gid first while the effective
/// uid is still 0. Real and saved uid stay 0, so `become_root` can return.
pub fn become_user(u: &User) {
    let groups: Vec<libc::gid_t> = u.groups.clone();
    let (n, list) = (
        groups.len() as libc::c_long,
        groups.as_ptr() as libc::c_long,
    );
    cred(libc::SYS_setgroups, [n, list, 0], "setgroups");
    cred(libc::SYS_setresgid, [-1, u.gid.into(), -1], "setresgid");
    cred(libc::SYS_setresuid, [-1, u.uid.into(), -1], "setresuid");
}

/// Back to root on this thread: uid first, then gid and groups.
pub fn become_root() {
    cred(libc::SYS_setresuid, [-1, 0, -1], "setresuid");
    cred(libc::SYS_setresgid, [-1, 0, -1], "setresgid");
    cred(libc::SYS_setgroups, [0, 0, 0], "setgroups");
}

/// Runs `f` as `u` on a thread of its own.
pub fn as_user<T: Send>(u: &User, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            become_user(u);
            f()
        })
        .join()
        .unwrap_or_else(|_| panic!("as {u:?}: the operation panicked"))
    })
}

pub fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

/// A system call's result: Ok(return value) or Err(errno).
pub fn sys(r: libc::c_long) -> Result<libc::c_long, i32> {
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}
