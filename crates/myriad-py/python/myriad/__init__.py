"""The Myriad distributed file system from Python.

    import myriad
    c = myriad.Client("/tmp/myr/cluster.json")   # or $MYRIAD_CLUSTER
    c.write("/data/a.txt", b"hello")
    c.fetch("/data/a.txt")                        # one request to one server
    c.fetch_many(["/data/a.txt", ...])            # many small files at once
    with c.open("/data/b.csv", "w") as f: f.write("x,y\\n1,2\\n")

Errors are Python's own: FileNotFoundError, PermissionError, FileExistsError,
IsADirectoryError, NotADirectoryError, TimeoutError, and OSError with the errno for the
rest. fsspec reaches the cluster as ``myriad://`` (``myriad.fsspec.MyriadFileSystem``).
"""

from ._client import Client
from ._native import FETCH_MANY_PARALLEL, Handle, Stat

try:
    from importlib.metadata import PackageNotFoundError as _NotFound
    from importlib.metadata import version as _version

    __version__ = _version("myriad")
except _NotFound:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = ["Client", "Stat", "Handle", "FETCH_MANY_PARALLEL", "__version__"]
