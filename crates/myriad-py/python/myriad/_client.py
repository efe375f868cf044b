"""`Client`: the native client plus what is better said in Python (paths made canonical,
`open()`, `walk`, `exists`)."""

import os
import posixpath
import stat as _stat

from . import _native
from ._files import _umask, open_file


def canonical(path):
    """An absolute path with no empty, "." or ".." parts (".." is taken lexically).

    Accepts str and os.PathLike; a relative path is an error (the cluster has no working
    directory)."""
    p = os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p.startswith("/"):
        raise ValueError(f"myriad paths are absolute (start with '/'): {p!r}")
    p = posixpath.normpath(p)
    # normpath keeps a leading "//" (POSIX leaves its meaning open); here it is "/".
    return "/" + p.lstrip("/")


def _bytes_like(data, what):
    if isinstance(data, str):
        raise TypeError(
            f"{what} takes bytes-like data, not str: encode it first "
            "(data.encode()) or use open(path, 'w')")
    return bytes(data)


class Client(_native.Client):
    """A connection to a Myriad cluster, safe to share between threads (each call releases
    the GIL) and usable after fork (a child process makes its own connections).

    A client can be pickled (a DataLoader worker started with ``spawn`` or ``forkserver``
    gets one): it connects again where it is loaded, to the same cluster with the same key
    file. It is a context manager: ``with myriad.Client(...) as c:``."""

    def __init__(self, cluster_file=None, secret_file=None, timeout=30.0, zone=None):
        # Connected by the native constructor with the same arguments; kept to connect
        # again where a pickled copy is loaded (the environment there may differ).
        cluster_file = cluster_file if cluster_file is not None else os.environ.get("MYRIAD_CLUSTER")
        secret_file = (secret_file if secret_file is not None
                       else os.environ.get("MYRIAD_SECRET_FILE"))
        self._args = (cluster_file, secret_file, timeout, zone)

    def __reduce__(self):
        return (type(self), self._args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Nothing to release early: connections close with the last reference to the
        client. Kept so a client reads like a file or a socket."""

    def __repr__(self):
        return f"myriad.Client({self._args[0]!r})"

    def fetch(self, path):
        """A file's whole contents (bytes): one request for a small file."""
        return super().fetch(canonical(path))

    def fetch_many(self, paths, parallel=_native.FETCH_MANY_PARALLEL, on_error="raise"):
        """The contents of many files, in order, `parallel` at a time (see the native
        method for `on_error`)."""
        return super().fetch_many([canonical(p) for p in paths], parallel, on_error)

    def read(self, path, offset=0, size=None):
        return super().read(canonical(path), offset, size)

    def write(self, path, data, mode=0o666):
        """Makes `path` a file holding exactly `data` (bytes-like); a new file gets `mode`
        masked by the process umask (as open() and os.open do)."""
        return super().write(canonical(path), _bytes_like(data, "write()"), mode & ~_umask())

    def write_many(self, items, mode=0o666, parallel=_native.FETCH_MANY_PARALLEL):
        """Writes many files at once: `items` is a dict or pairs of (path, data). New files
        get `mode` masked by the process umask."""
        pairs = items.items() if hasattr(items, "items") else items
        return super().write_many(
            [(canonical(p), _bytes_like(d, "write_many()")) for p, d in pairs],
            mode & ~_umask(), parallel
        )

    def stat(self, path, follow_symlinks=True):
        """As os.stat: a symbolic link is followed unless `follow_symlinks` is False."""
        return super().stat(canonical(path), follow_symlinks)

    def lstat(self, path):
        """As os.lstat: the attributes of a symbolic link itself."""
        return super().stat(canonical(path), False)

    def exists(self, path):
        try:
            super().stat(canonical(path))
            return True
        except FileNotFoundError:
            return False

    def isdir(self, path):
        try:
            return _stat.S_ISDIR(super().stat(canonical(path)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isfile(self, path):
        try:
            return _stat.S_ISREG(super().stat(canonical(path)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def listdir(self, path="/"):
        return super().listdir(canonical(path))

    def scandir(self, path="/"):
        return super().scandir(canonical(path))

    def walk(self, top="/", topdown=True):
        """Like os.walk: (dirpath, dirnames, filenames) for `top` and every directory
        under it, one listing per directory (symbolic links are not followed)."""
        top = canonical(top)
        try:
            entries = super().scandir(top)
        except (FileNotFoundError, NotADirectoryError):
            return
        dirs = [n for n, st in entries if st.is_dir()]
        files = [n for n, st in entries if not st.is_dir()]
        if topdown:
            yield top, dirs, files
        for d in dirs:
            yield from self.walk(posixpath.join(top, d), topdown)
        if not topdown:
            yield top, dirs, files

    def mkdir(self, path, mode=0o777, parents=False, exist_ok=False):
        """As os.mkdir: the new directory gets `mode` masked by the process umask (missing
        parents too, with `parents`)."""
        return super().mkdir(canonical(path), mode & ~_umask(), parents, exist_ok)

    def makedirs(self, path, mode=0o777, exist_ok=False):
        """As os.makedirs: every directory made gets `mode` masked by the process umask."""
        return super().mkdir(canonical(path), mode & ~_umask(), True, exist_ok)

    def remove(self, path, recursive=False):
        """Removes a file, or a directory: an empty one, or with `recursive` everything
        under it first (as rm -r)."""
        path = canonical(path)
        st = super().stat(path, False)
        if not st.is_dir():
            return super().remove(path)
        if recursive:
            for d, dirs, files in list(self.walk(path, topdown=False)):
                for f in files:
                    super().remove(posixpath.join(d, f))
                for sub in dirs:
                    super().rmdir(posixpath.join(d, sub))
        return super().rmdir(path)

    def rmdir(self, path):
        return super().rmdir(canonical(path))

    def rename(self, src, dst):
        return super().rename(canonical(src), canonical(dst))

    def symlink(self, target, path):
        return super().symlink(target, canonical(path))

    def readlink(self, path):
        return super().readlink(canonical(path))

    def chmod(self, path, mode):
        return super().chmod(canonical(path), mode)

    def chown(self, path, uid, gid, follow_symlinks=True):
        """As os.chown: -1 leaves the owner or group as it is."""
        return super().chown(canonical(path), uid, gid, follow_symlinks)

    def utime(self, path, times=None, *, ns=None, follow_symlinks=True):
        """As os.utime: `times` (atime, mtime) in seconds or `ns` in nanoseconds; neither
        sets both to now."""
        if times is not None and ns is not None:
            raise ValueError("utime: give times or ns, not both")
        if times is not None:
            ns = tuple(int(round(t * 1_000_000_000)) for t in times)
        return super().utime(canonical(path), ns, follow_symlinks)

    def truncate(self, path, length):
        return super().truncate(canonical(path), length)

    def link(self, src, dst):
        """As os.link: `dst` becomes another name of the file `src`."""
        return super().link(canonical(src), canonical(dst))

    def access(self, path, mode):
        """As os.access, with this client's user."""
        return super().access(canonical(path), mode)

    def getxattr(self, path, name, follow_symlinks=True):
        return super().getxattr(canonical(path), name, follow_symlinks)

    def listxattr(self, path, follow_symlinks=True):
        return super().listxattr(canonical(path), follow_symlinks)

    def setxattr(self, path, name, value, flags=0, follow_symlinks=True):
        """As os.setxattr (names in the ``user.`` namespace)."""
        return super().setxattr(canonical(path), name, _bytes_like(value, "setxattr()"),
                                flags, follow_symlinks)

    def removexattr(self, path, name, follow_symlinks=True):
        return super().removexattr(canonical(path), name, follow_symlinks)

    def copy(self, src, dst, mode=0o666):
        """Copies the file `src` to `dst` on the servers: no byte passes through this
        process. A new `dst` gets `mode` masked by the umask; an existing one is rewritten.
        Returns the number of bytes copied."""
        return super().copy(canonical(src), canonical(dst), mode & ~_umask())

    def open(self, path, mode="r", buffering=-1, encoding=None, errors=None, newline=None):
        """A file object as the built-in open() gives: modes r, w, x, a with b, t and +."""
        return open_file(self, canonical(path), mode, buffering, encoding, errors, newline)
