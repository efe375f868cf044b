"""The fsspec filesystem for ``myriad://`` URLs (registered by the package's entry point),
so pandas, Dask, fsspec.open and the data loaders of ML frameworks reach a cluster:

    pandas.read_csv("myriad:///data/table.csv")           # cluster from $MYRIAD_CLUSTER
    fsspec.filesystem("myriad", cluster="/tmp/myr/cluster.json").cat(paths)

``myriad:///a/b`` and ``myriad://a/b`` both name ``/a/b``; ``myriad://h1:7401,h2:7401/a/b``
names ``/a/b`` on the cluster those servers serve (the key from ``secret_file`` or
$MYRIAD_SECRET_FILE). ``cat`` of many paths fetches
them together (``Client.fetch_many``): one request per small file, many in flight.
"""

import datetime
import posixpath
import re

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from ._client import Client

_KINDS = {"file": "file", "directory": "directory"}

# host:port[,host:port...] (IPv6 hosts in brackets): servers named in a URL's netloc.
_ADDRESSES = re.compile(r"(?:(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5})(?:,(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5})*")


def _info(path, st):
    return {
        "name": path,
        "size": st.st_size,
        "type": _KINDS.get(st.kind, "other"),
        "mode": st.st_mode,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "nlink": st.st_nlink,
        "ino": st.st_ino,
        "mtime": st.st_mtime,
        "islink": st.kind == "symlink",
        "destination": st.target,
    }


class MyriadFileSystem(AbstractFileSystem):
    """A Myriad cluster as an fsspec filesystem.

    Options: ``cluster`` (the cluster map file; default $MYRIAD_CLUSTER), ``secret_file``
    (default $MYRIAD_SECRET_FILE or the key beside the map), ``timeout`` (seconds)."""

    protocol = "myriad"
    root_marker = "/"

    def __init__(self, cluster=None, secret_file=None, timeout=30.0, **kwargs):
        super().__init__(cluster=cluster, secret_file=secret_file, timeout=timeout, **kwargs)
        self.client = Client(cluster, secret_file, timeout)

    @staticmethod
    def _servers_in(path):
        """The servers a ``myriad://h1:7401,h2:7401/path`` URL names, else None."""
        path = str(path)
        if not path.startswith("myriad://"):
            return None
        netloc = path[len("myriad://"):].split("/", 1)[0]
        return netloc if netloc and _ADDRESSES.fullmatch(netloc) else None

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        servers = cls._servers_in(path)
        if path.startswith("myriad://"):
            path = path[len("myriad://"):]
        if servers:
            path = path[len(servers):]
        path = "/" + path.lstrip("/")
        return path.rstrip("/") or "/"

    @classmethod
    def _get_kwargs_from_urls(cls, path):
        """``myriad://h1:7401/data/x``: the cluster is the servers the URL names."""
        servers = cls._servers_in(path)
        return {"cluster": servers} if servers else {}

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.stat(path)
        if st.is_dir():
            out = [_info(posixpath.join(path, n), s) for n, s in self.client.scandir(path)]
        else:
            out = [_info(path, st)]
        return out if detail else [o["name"] for o in out]

    def info(self, path, **kwargs):
        """As fsspec's local filesystem: a symbolic link is described by what it names
        (size, type), with ``islink`` and its ``destination``."""
        path = self._strip_protocol(path)
        st = self.client.lstat(path)
        if st.kind != "symlink":
            return _info(path, st)
        out = _info(path, self.client.stat(path))
        out["islink"] = True
        out["destination"] = st.target
        return out

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.client.fetch(path)
        size = None
        if start is None:
            start = 0
        if start < 0 or (end is not None and end < 0):
            total = self.client.stat(path).st_size
            start = max(total + start, 0) if start < 0 else start
            end = total + end if end is not None and end < 0 else end
        if end is not None:
            size = max(end - start, 0)
        return self.client.read(path, start, size)

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        """Many files' contents at once: a list of plain paths is fetched together."""
        plain = (isinstance(path, (list, tuple)) and not recursive
                 and not any(self._is_glob(p) for p in path))
        if not plain:
            return super().cat(path, recursive=recursive, on_error=on_error, **kwargs)
        paths = [self._strip_protocol(p) for p in path]
        how = "return" if on_error == "return" else ("omit" if on_error == "omit" else "raise")
        got = self.client.fetch_many(paths, on_error=how)
        if how == "omit":
            return {p: d for p, d in zip(paths, got) if d is not None}
        return dict(zip(paths, got))

    def fetch_many(self, paths, **kwargs):
        """The contents of many files, in order (``Client.fetch_many``)."""
        return self.client.fetch_many([self._strip_protocol(p) for p in paths], **kwargs)

    @staticmethod
    def _is_glob(p):
        return any(c in str(p) for c in "*?[")

    def pipe_file(self, path, value, **kwargs):
        self.client.write(self._strip_protocol(path), value)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              cache_type="readahead", **kwargs):
        """Reading: fsspec's buffered file (``size``, ``path``, ``read_block``, its caches
        with ``block_size`` and ``cache_options``) over ranged reads of the cluster.
        Writing: the client's own file object (writes go to the servers as they come)."""
        path = self._strip_protocol(path)
        if mode == "rb":
            return MyriadReadFile(self, path, mode, block_size or "default",
                                  cache_type=cache_type, cache_options=cache_options,
                                  **kwargs)
        return self.client.open(path, mode)

    def touch(self, path, truncate=True, **kwargs):
        """An empty file at `path`; an existing one is emptied (`truncate`) or only has its
        times set to now."""
        path = self._strip_protocol(path)
        if truncate or not self.client.exists(path):
            self.client.write(path, b"")
        else:
            self.client.utime(path)

    def mkdir(self, path, create_parents=True, **kwargs):
        self.client.mkdir(self._strip_protocol(path), parents=create_parents,
                          exist_ok=create_parents)

    def makedirs(self, path, exist_ok=False):
        self.client.mkdir(self._strip_protocol(path), parents=True, exist_ok=exist_ok)

    def rmdir(self, path):
        self.client.rmdir(self._strip_protocol(path))

    def rm_file(self, path):
        self.client.remove(self._strip_protocol(path))

    def _rm(self, path):
        path = self._strip_protocol(path)
        if self.client.isdir(path):
            self.client.rmdir(path)
        else:
            self.client.remove(path)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        """A rename on the cluster (atomic, whatever the size of the tree moved)."""
        if isinstance(path1, str) and isinstance(path2, str):
            self.client.rename(self._strip_protocol(path1), self._strip_protocol(path2))
        else:
            super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def cp_file(self, path1, path2, **kwargs):
        """A copy made on the servers (``Client.copy``)."""
        src, dst = self._strip_protocol(path1), self._strip_protocol(path2)
        if self.client.isdir(src):
            self.client.mkdir(dst, exist_ok=True)
            return
        self.client.copy(src, dst)

    def modified(self, path):
        st = self.client.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.st_mtime, tz=datetime.timezone.utc)

    def created(self, path):
        # The cluster keeps no birth time; the change time is the nearest it has.
        st = self.client.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.st_ctime, tz=datetime.timezone.utc)

    def ukey(self, path):
        st = self.client.stat(self._strip_protocol(path))
        return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


class MyriadReadFile(AbstractBufferedFile):
    """A file of the cluster opened for reading through fsspec: its caches fetch ranges with
    ``Client.read`` (one request for a range within a chunk)."""

    def _fetch_range(self, start, end):
        return self.fs.client.read(self.path, start, max(end - start, 0))

