//! POSIX behaviours of the mount that once went wrong (issue 16), each through a real
//! mount of a 4-node cluster with 3 copies, as the users POSIX names: root, the owner,
//! another user, a member of the owner's group. Data-path behaviours (stale data and
//! sizes, short reads, mapped I/O, fallocate, copy_file_range) are exercised by `fsx.rs`.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use crate::creds::{User, as_user, cpath, member, other, owner, root, sys};
use crate::harness::TestCluster;
use crate::mount::Mount;

fn meta(p: &Path) -> fs::Metadata {
    fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e:?}"))
}

fn mkdir_as(u: &User, p: &Path, mode: u32) -> Result<(), i32> {
    let c = cpath(p);
    // SAFETY: valid path.
    as_user(u, || sys(unsafe { libc::mkdir(c.as_ptr(), mode) }.into())).map(|_| ())
}

fn create_as(u: &User, p: &Path, mode: u32, data: &[u8]) -> Result<(), i32> {
    let c = cpath(p);
    as_user(u, || {
        // SAFETY: valid path and buffer; the descriptor is closed here.
        unsafe {
            let fd = sys(libc::open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC | libc::O_CLOEXEC,
                mode,
            )
            .into())?;
            let fd = fd as i32;
            let w = sys(libc::write(fd, data.as_ptr().cast(), data.len()) as libc::c_long);
            let c = sys(libc::close(fd).into());
            w.and(c).map(|_| ())
        }
    })
}

fn rename_as(u: &User, from: &Path, to: &Path) -> Result<(), i32> {
    let (f, t) = (cpath(from), cpath(to));
    // SAFETY: valid paths.
    as_user(u, || {
        sys(unsafe { libc::rename(f.as_ptr(), t.as_ptr()) }.into())
    })
    .map(|_| ())
}

fn unlink_as(u: &User, p: &Path) -> Result<(), i32> {
    let c = cpath(p);
    // SAFETY: valid path.
    as_user(u, || sys(unsafe { libc::unlink(c.as_ptr()) }.into())).map(|_| ())
}

fn chmod_as(u: &User, p: &Path, mode: u32) -> Result<(), i32> {
    let c = cpath(p);
    // SAFETY: valid path.
    as_user(u, || sys(unsafe { libc::chmod(c.as_ptr(), mode) }.into())).map(|_| ())
}

fn chown_as(u: &User, p: &Path, uid: u32, gid: u32) -> Result<(), i32> {
    let c = cpath(p);
    // SAFETY: valid path.
    as_user(u, || {
        sys(unsafe { libc::lchown(c.as_ptr(), uid, gid) }.into())
    })
    .map(|_| ())
}

/// utimensat; `None`: both times now (UTIME_NOW).
fn utimes_as(u: &User, p: &Path, secs: Option<i64>) -> Result<(), i32> {
    let c = cpath(p);
    let t = match secs {
        Some(s) => libc::timespec {
            tv_sec: s,
            tv_nsec: 0,
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    };
    let times = [t, t];
    // SAFETY: valid path and two timespecs.
    as_user(u, || {
        sys(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) }.into())
    })
    .map(|_| ())
}

/// A world-writable sticky directory owned by root, as /tmp.
fn sticky_dir(m: &Mount, name: &str) -> std::path::PathBuf {
    let d = m.path(name);
    ok(fs::create_dir(&d));
    ok(chmod_as(&root(), &d, 0o1777));
    d
}

#[test]
fn sticky_directories_devices_links_and_permission_errors() {
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    let m = Mount::new(&cl, &[]);
    let eperm = Err(libc::EPERM);

    // Sticky: another user can neither unlink root's file nor rename over it, nor move it
    // away; its own file it may rename; the directory's owner may remove anything.
    let t = sticky_dir(&m, "tmp");
    ok(fs::write(t.join("rootfile"), b"root's"));
    ok(create_as(&other(), &t.join("mine"), 0o644, b"mine"));
    assert_eq!(unlink_as(&other(), &t.join("rootfile")), eperm);
    assert_eq!(
        rename_as(&other(), &t.join("mine"), &t.join("rootfile")),
        eperm,
        "renaming over root's file in a sticky directory"
    );
    assert_eq!(ok(fs::read(t.join("rootfile"))), b"root's");
    assert_eq!(
        rename_as(&other(), &t.join("rootfile"), &t.join("taken")),
        eperm
    );
    ok(rename_as(&other(), &t.join("mine"), &t.join("mine2")));
    ok(mkdir_as(&other(), &t.join("other-dir"), 0o777));
    let away = m.path("away");
    ok(fs::create_dir(&away));
    ok(chmod_as(&root(), &away, 0o777));
    assert_eq!(
        rename_as(&owner(), &t.join("other-dir"), &away.join("d")),
        eperm,
        "moving another user's directory out of a sticky directory"
    );
    ok(unlink_as(&root(), &t.join("mine2")));

    // Devices: root makes them, the number round-trips; others get EPERM.
    let dev = libc::makedev(1, 3);
    let (c, b) = (cpath(&m.path("null")), cpath(&m.path("blk")));
    // SAFETY: valid paths.
    ok(sys(unsafe {
        libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, dev)
    }
    .into()));
    // SAFETY: valid path.
    ok(sys(unsafe {
        libc::mknod(b.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(8, 17))
    }
    .into()));
    assert_eq!(meta(&m.path("null")).rdev(), dev);
    assert_eq!(meta(&m.path("null")).mode() & libc::S_IFMT, libc::S_IFCHR);
    assert_eq!(meta(&m.path("blk")).rdev(), libc::makedev(8, 17));
    assert_eq!(meta(&m.path("blk")).mode() & libc::S_IFMT, libc::S_IFBLK);
    let udev = cpath(&t.join("udev"));
    assert_eq!(
        // SAFETY: valid path.
        as_user(&owner(), || sys(unsafe {
            libc::mknod(udev.as_ptr(), libc::S_IFCHR | 0o666, dev)
        }
        .into()))
        .map(|_| ()),
        eperm
    );

    // Hard links to a FIFO, a socket, a symlink and a device, as Linux allows.
    let fifo = cpath(&m.path("fifo"));
    // SAFETY: valid path.
    ok(sys(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }.into()));
    let sock = ok(std::os::unix::net::UnixListener::bind(m.path("sock")));
    ok(std::os::unix::fs::symlink("fifo", m.path("sym")));
    for name in ["fifo", "sock", "sym", "null"] {
        let (from, to) = (m.path(name), m.path(&format!("{name}.2")));
        // linkat without AT_SYMLINK_FOLLOW: the symlink itself gets the name.
        let (f, t2) = (cpath(&from), cpath(&to));
        // SAFETY: valid paths.
        ok(sys(unsafe {
            libc::linkat(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t2.as_ptr(), 0)
        }
        .into()));
        let (a, b2) = (meta(&from), meta(&to));
        assert_eq!(
            (a.ino(), a.nlink()),
            (b2.ino(), 2),
            "{name}: one inode, two names"
        );
        assert_eq!(a.mode(), b2.mode());
    }
    assert_eq!(ok(fs::read_link(m.path("sym.2"))), Path::new("fifo"));
    assert_eq!(meta(&m.path("null.2")).rdev(), dev);
    drop(sock);
    ok(fs::remove_file(m.path("fifo")));
    assert_eq!(meta(&m.path("fifo.2")).nlink(), 1);

    // chmod, chown, utimes by a non-owner: EPERM; a touch by a writer works, by anyone
    // else EACCES; chown to the current owner by a non-owner: EPERM.
    let f = m.path("f");
    ok(create_as(&owner(), &f, 0o664, b"x"));
    ok(chmod_as(&owner(), &f, 0o664)); // whatever the umask took
    assert_eq!(chmod_as(&other(), &f, 0o777), eperm);
    assert_eq!(chown_as(&other(), &f, 1000, u32::MAX), eperm);
    assert_eq!(chown_as(&other(), &f, 1001, u32::MAX), eperm);
    assert_eq!(chown_as(&owner(), &f, 1001, u32::MAX), eperm);
    assert_eq!(
        chown_as(&owner(), &f, u32::MAX, 1001),
        eperm,
        "not the owner's group"
    );
    assert_eq!(utimes_as(&other(), &f, Some(1_000_000)), eperm);
    assert_eq!(utimes_as(&member(), &f, Some(1_000_000)), eperm);
    assert_eq!(utimes_as(&other(), &f, None), Err(libc::EACCES));
    ok(utimes_as(&member(), &f, None));
    ok(utimes_as(&owner(), &f, Some(1_000_000)));
    assert_eq!(meta(&f).mtime(), 1_000_000);
    ok(chmod_as(&owner(), &f, 0o640));

    // A FIFO's permission bits are honoured at open.
    let p = m.path("private-fifo");
    let pc = cpath(&p);
    // SAFETY: valid path.
    ok(sys(unsafe { libc::mkfifo(pc.as_ptr(), 0o600) }.into()));
    let open_fifo = |u: &User| {
        as_user(u, || {
            // SAFETY: valid path; closed below.
            let fd = sys(unsafe {
                libc::open(
                    pc.as_ptr(),
                    libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
                )
            }
            .into())?;
            // SAFETY: our descriptor.
            unsafe { libc::close(fd as i32) };
            Ok::<(), i32>(())
        })
    };
    assert_eq!(open_fifo(&other()), Err(libc::EACCES));
    ok(open_fifo(&root()));
}

#[test]
fn set_id_bits_descriptor_access_unlinked_files_directory_times_and_limits() {
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    let m = Mount::new(&cl, &[]);
    let shared = m.path("shared");
    ok(fs::create_dir(&shared));
    ok(chmod_as(&root(), &shared, 0o777));

    // A write by another user to a world-writable set-id file succeeds and clears the
    // bits; so do a truncate by another user and a chown by the (non-root) owner.
    let s = shared.join("suid");
    ok(create_as(&owner(), &s, 0o6777, b"old"));
    ok(chmod_as(&owner(), &s, 0o6777));
    let sc = cpath(&s);
    as_user(&other(), || {
        // SAFETY: valid path and buffer; closed here.
        unsafe {
            let fd = ok(sys(libc::open(
                sc.as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            )
            .into())) as i32;
            assert_eq!(libc::write(fd, b"new".as_ptr().cast(), 3), 3);
            libc::close(fd);
        }
    });
    assert_eq!(
        meta(&s).mode() & 0o7777,
        0o777,
        "set-id bits cleared by the write"
    );
    assert_eq!(ok(fs::read(&s)), b"new");
    ok(chmod_as(&owner(), &s, 0o6777));
    // SAFETY: valid path.
    as_user(&other(), || {
        ok(sys(unsafe { libc::truncate(sc.as_ptr(), 1) }.into()))
    });
    assert_eq!(meta(&s).mode() & 0o7777, 0o777, "cleared by the truncate");
    ok(chmod_as(&owner(), &s, 0o6777));
    ok(chown_as(&owner(), &s, u32::MAX, 1000));
    assert_eq!(meta(&s).mode() & 0o7777, 0o777, "cleared by the chown");

    // Bytes root wrote and the mount still buffers are sent as root, also when another
    // user's open of the file is what sends them (fsx lost such bytes under load: sent as
    // another identity, refused, dropped).
    let r = shared.join("roots");
    let rc = cpath(&r);
    // SAFETY: valid path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            rc.as_ptr(),
            libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC,
            0o644,
        )
    };
    assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
    // SAFETY: our descriptor and a valid buffer.
    assert_eq!(
        unsafe { libc::write(fd, b"root's bytes".as_ptr().cast(), 12) },
        12
    );
    let seen = as_user(&other(), || fs::read(&r).map_err(|e| e.to_string()));
    assert_eq!(
        seen.as_deref(),
        Ok(&b"root's bytes"[..]),
        "another user's read of a file root is writing"
    );
    // SAFETY: our descriptor.
    assert_eq!(
        unsafe { libc::close(fd) },
        0,
        "root's close reports no error"
    );
    assert_eq!(ok(fs::read(&r)), b"root's bytes");

    // A descriptor from open(O_CREAT|O_RDWR, 0) writes and truncates: its access decides.
    let z = shared.join("mode0");
    let zc = cpath(&z);
    as_user(&owner(), || {
        // SAFETY: valid path and buffer; closed here.
        unsafe {
            let fd = ok(sys(libc::open(
                zc.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0,
            )
            .into())) as i32;
            assert_eq!(libc::write(fd, b"hello".as_ptr().cast(), 5), 5);
            ok(sys(libc::ftruncate(fd, 2).into()));
            ok(sys(libc::close(fd).into()));
        }
    });
    assert_eq!(ok(fs::read(&z)), b"he");
    assert_eq!(meta(&z).mode() & 0o7777, 0);

    // fstat of an open file whose last name is gone: nlink 0; the data stays readable.
    let u = m.path("unlinked");
    ok(fs::write(&u, b"still here"));
    let fh = ok(fs::File::open(&u));
    ok(fs::remove_file(&u));
    assert_eq!(ok(fh.metadata()).nlink(), 0);
    let mut back = String::new();
    ok(std::io::Read::read_to_string(&mut &fh, &mut back));
    assert_eq!(back, "still here");
    drop(fh);

    // A directory's mtime and ctime change with every entry change in it, and its link
    // count counts its subdirectories.
    let d = m.path("times");
    ok(fs::create_dir(&d));
    let d2 = m.path("times2");
    ok(fs::create_dir(&d2));
    let stamp = |p: &Path| {
        let x = meta(p);
        ((x.mtime(), x.mtime_nsec()), (x.ctime(), x.ctime_nsec()))
    };
    let changes = |what: &str, dirs: &[&Path], op: &mut dyn FnMut()| {
        let before: Vec<_> = dirs.iter().map(|p| stamp(p)).collect();
        std::thread::sleep(Duration::from_millis(5));
        op();
        for (p, b) in dirs.iter().zip(before) {
            let a = stamp(p);
            assert!(
                a.0 > b.0 && a.1 > b.1,
                "{what}: {} times {b:?} -> {a:?}",
                p.display()
            );
        }
    };
    changes("create", &[&d], &mut || ok(fs::write(d.join("f"), b"1")));
    changes("mkdir", &[&d], &mut || ok(fs::create_dir(d.join("sub"))));
    assert_eq!(meta(&d).nlink(), 3);
    changes("mkfifo", &[&d], &mut || {
        let c = cpath(&d.join("p"));
        // SAFETY: valid path.
        ok(sys(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }.into()));
    });
    changes("mknod", &[&d], &mut || {
        let c = cpath(&d.join("dev"));
        // SAFETY: valid path.
        ok(sys(unsafe {
            libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0)
        }
        .into()));
    });
    changes("symlink", &[&d], &mut || {
        ok(std::os::unix::fs::symlink("f", d.join("l")))
    });
    changes("link", &[&d], &mut || {
        ok(fs::hard_link(d.join("f"), d.join("f2")))
    });
    changes("rename within", &[&d], &mut || {
        ok(fs::rename(d.join("f2"), d.join("f3")))
    });
    changes("rename across", &[&d, &d2], &mut || {
        ok(fs::rename(d.join("f3"), d2.join("f")))
    });
    changes("rename a directory across", &[&d, &d2], &mut || {
        ok(fs::rename(d.join("sub"), d2.join("sub")));
    });
    assert_eq!((meta(&d).nlink(), meta(&d2).nlink()), (2, 3));
    // A directory renamed from below over an empty one (one step on the servers): the
    // count the kernel is told is the final one at once.
    ok(fs::create_dir(d.join("e1")));
    ok(fs::create_dir(d.join("e1/inner")));
    ok(fs::create_dir(d.join("e2")));
    assert_eq!(meta(&d).nlink(), 4);
    changes("rename a directory over an empty one", &[&d], &mut || {
        ok(fs::rename(d.join("e1/inner"), d.join("e2")));
    });
    assert_eq!(meta(&d).nlink(), 4, "e1 and e2 (was inner)");
    assert_eq!(meta(&d.join("e1")).nlink(), 2);
    ok(fs::remove_dir(d.join("e2")));
    ok(fs::remove_dir(d.join("e1")));
    changes("unlink", &[&d], &mut || ok(fs::remove_file(d.join("p"))));
    changes("rmdir", &[&d2], &mut || ok(fs::remove_dir(d2.join("sub"))));
    assert_eq!(meta(&d2).nlink(), 2);
    let root_links = meta(m.dir.path()).nlink();
    ok(fs::create_dir(m.path("one-more")));
    assert_eq!(
        meta(m.dir.path()).nlink(),
        root_links + 1,
        "the root counts too"
    );

    // A path argument may be 4,095 bytes (PATH_MAX) relative to any directory, and the
    // directory may itself lie deep: the servers take absolute paths longer than that
    // (issue 47: 58 assertions of a POSIX suite working in a directory below the mount
    // failed with ENAMETOOLONG). Two 4,095-byte chains, the second from the end of the
    // first, below a subdirectory: a file at 8,000+ bytes from the mount's root.
    ok(fs::create_dir(m.path("deep")));
    let mut from = ok(fs::File::open(m.path("deep")));
    let mut absolute = "/deep".len();
    for round in 0..2 {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&from);
        let name = "n".repeat(254);
        let mut rel = String::new();
        while 4095 - rel.len() > 255 {
            rel.push_str(&name);
            let c = ok(std::ffi::CString::new(rel.as_str()));
            // SAFETY: valid directory descriptor and path.
            ok(sys(unsafe { libc::mkdirat(fd, c.as_ptr(), 0o755) }.into()));
            rel.push('/');
        }
        let last = "f".repeat(4095 - rel.len());
        assert!(last.len() <= 255);
        let full = format!("{rel}{last}");
        assert_eq!(full.len(), 4095);
        let at = |p: &str, flags| {
            let c = ok(std::ffi::CString::new(p));
            // SAFETY: valid directory descriptor and path.
            sys(unsafe { libc::openat(fd, c.as_ptr(), flags | libc::O_CLOEXEC, 0o644) }.into())
        };
        let made = ok(at(&full, libc::O_CREAT | libc::O_WRONLY));
        // SAFETY: our descriptor.
        unsafe { libc::close(made as i32) };
        // The kernel's own limit on one path argument.
        assert_eq!(
            at(&format!("{full}x"), libc::O_CREAT | libc::O_WRONLY),
            Err(libc::ENAMETOOLONG)
        );
        let deepest = ok(at(
            rel.trim_end_matches('/'),
            libc::O_RDONLY | libc::O_DIRECTORY,
        ));
        // SAFETY: a descriptor just opened, owned from here on.
        from = unsafe { <fs::File as std::os::fd::FromRawFd>::from_raw_fd(deepest as i32) };
        absolute += 1 + rel.len() - 1;
        assert!(round == 0 || absolute > 8000, "{absolute}");
    }
}

/// Writes past RLIMIT_FSIZE and truncates, in a child process (a limit and a signal
/// disposition are per process: the test harness's threads must not share them).
const FSIZE_SCRIPT: &str = r#"
import os, resource, signal, sys, time
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (100000, hard))
first = os.pwrite(fd, b"7" * 150000, 0)
try:
    os.pwrite(fd, b"7" * 10, 200000)
    past = 0
except OSError as e:
    past = e.errno
t = time.time()
os.ftruncate(fd, 0)
took = time.time() - t
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
os.ftruncate(fd, (1 << 63) - 1)
t = time.time()
os.ftruncate(fd, 0)
took2 = time.time() - t
print(first, past, os.fstat(fd).st_size, round(took, 3), round(took2, 3))
"#;

#[test]
fn file_size_limit_and_huge_sparse_files_never_hang() {
    let cl = TestCluster::start_with(4, &["--replicas", "3"]);
    let m = Mount::new(&cl, &[]);
    let out = ok(std::process::Command::new("python3")
        .arg("-c")
        .arg(FSIZE_SCRIPT)
        .arg(m.path("big"))
        .output());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<f64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(v.len(), 5, "{text}");
    assert_eq!(v[0], 100_000.0, "a write crossing the limit stops at it");
    assert_eq!(v[1], f64::from(libc::EFBIG), "a write past it is EFBIG");
    assert_eq!(v[2], 0.0, "truncated, through the same descriptor");
    assert!(v[3] < 10.0, "ftruncate after EFBIG took {} s", v[3]);
    assert!(
        v[4] < 10.0,
        "truncating a 2^63-1 byte sparse file took {} s",
        v[4]
    );
    // No operation programs use is answered "not implemented".
    let log = m.log_text();
    assert!(!log.contains("Not Implemented"), "mount log: {log}");
}

/// A write the mount only buffers, then an `fstat` before the close (the kernel keeps
/// the attributes it was answered), then a stat after the close: the stat shows the
/// write's time, not the one the `fstat` saw before the bytes were sent (nsx seed 1 with
/// listings kept by the kernel: no listing refreshed the attributes any more).
#[test]
fn a_stat_after_a_buffered_write_and_an_fstat_shows_the_write_s_time() {
    use std::io::Write;
    let tc = TestCluster::start(3);
    let m = Mount::new(&tc, &[]);
    let p = m.path("f");
    ok(fs::write(&p, b"0123456789"));
    let before = meta(&p).mtime_nsec() as i128 + i128::from(meta(&p).mtime()) * 1_000_000_000;
    std::thread::sleep(Duration::from_millis(20));
    let mut f = ok(fs::OpenOptions::new().write(true).open(&p));
    ok(f.write_all(b"abc"));
    let during = ok(f.metadata());
    drop(f);
    let after = meta(&p);
    let after = after.mtime_nsec() as i128 + i128::from(after.mtime()) * 1_000_000_000;
    assert!(
        after >= before + 20_000_000,
        "mtime after the write {after}, before it {before} (the fstat saw {}.{})",
        during.mtime(),
        during.mtime_nsec()
    );
}

/// A change made through a descriptor (fchmod, fchown, futimens) is made to the open
/// file, never to another file put at its name meanwhile by another mount: the mount
/// names a file by its path, and the servers refuse a change of attributes whose name
/// now holds another inode (`SetAttr::of`). (Before: the other mount's file took the
/// mode, owner and times meant for the open one.)
#[test]
fn a_descriptor_s_attribute_change_never_lands_on_the_file_another_mount_put_at_its_name() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::io::AsRawFd;
    let cl = TestCluster::start_with(3, &["--replicas", "2"]);
    let (a, b) = (Mount::new(&cl, &[]), Mount::new(&cl, &[]));
    ok(fs::write(a.path("f"), b"the open one"));
    ok(fs::set_permissions(
        a.path("f"),
        fs::Permissions::from_mode(0o644),
    ));
    let open = ok(fs::File::open(a.path("f")));
    // Mount B puts another file at the name.
    ok(fs::write(b.path("g"), b"the other one"));
    ok(fs::set_permissions(
        b.path("g"),
        fs::Permissions::from_mode(0o644),
    ));
    ok(fs::rename(b.path("g"), b.path("f")));
    let other_before = meta(&b.path("f"));
    std::thread::sleep(Duration::from_millis(20));
    // SAFETY: a descriptor this test holds open.
    let chmod = unsafe { libc::fchmod(open.as_raw_fd(), 0o600) };
    // SAFETY: as above; both times now.
    let touch = unsafe { libc::futimens(open.as_raw_fd(), std::ptr::null()) };
    let after = meta(&b.path("f"));
    assert_eq!(
        (
            after.mode() & 0o7777,
            after.mtime_nsec(),
            after.ctime_nsec()
        ),
        (
            other_before.mode() & 0o7777,
            other_before.mtime_nsec(),
            other_before.ctime_nsec()
        ),
        "the other mount's file changed (fchmod {chmod}, futimens {touch})"
    );
    assert_eq!(ok(fs::read(a.path("f"))), b"the other one");
}
