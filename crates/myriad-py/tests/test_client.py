"""The Client against a real cluster: every verb, the file object, and the error mapping."""

import errno
import os
import stat
import threading

import pytest

import myriad


def test_write_then_fetch_read_and_stat(client, tree):
    p = f"{tree}/a.bin"
    data = os.urandom(10_000)
    assert client.write(p, data) == len(data)
    assert client.fetch(p) == data
    assert client.read(p) == data
    assert client.read(p, 100, 50) == data[100:150]
    assert client.read(p, 9_990) == data[9_990:]
    assert client.read(p, 20_000, 10) == b""
    st = client.stat(p)
    assert st.st_size == len(data)
    assert stat.S_ISREG(st.st_mode) and st.is_file() and not st.is_dir()
    assert st.st_mode & 0o777 == 0o644
    assert st.st_uid == os.getuid()
    # Rewriting replaces the contents in place (same inode), shorter or longer.
    client.write(p, b"short")
    assert client.fetch(p) == b"short"
    assert client.stat(p).st_ino == st.st_ino


def test_a_file_larger_than_a_chunk_round_trips(client, tree):
    p = f"{tree}/big"
    data = os.urandom(9 * 1024 * 1024 + 123)
    client.write(p, data)
    assert client.fetch(p) == data
    assert client.read(p, 4 * 1024 * 1024 - 10, 20) == data[4 * 1024 * 1024 - 10:][:20]


def test_directories_listdir_scandir_walk(client, tree):
    client.mkdir(f"{tree}/d1/d2", parents=True)
    client.write(f"{tree}/d1/x", b"x")
    client.write(f"{tree}/d1/d2/y", b"yy")
    client.symlink("x", f"{tree}/d1/link")
    assert sorted(client.listdir(f"{tree}/d1")) == ["d2", "link", "x"]
    kinds = {n: s.kind for n, s in client.scandir(f"{tree}/d1")}
    assert kinds == {"d2": "directory", "link": "symlink", "x": "file"}
    assert client.readlink(f"{tree}/d1/link") == "x"
    walked = [(d, sorted(ds), sorted(fs)) for d, ds, fs in client.walk(tree)]
    assert walked == [
        (tree, ["d1"], []),
        (f"{tree}/d1", ["d2"], ["link", "x"]),
        (f"{tree}/d1/d2", [], ["y"]),
    ]
    # exist_ok and parents are as os.makedirs has them.
    client.mkdir(f"{tree}/d1", exist_ok=True)
    with pytest.raises(FileExistsError):
        client.mkdir(f"{tree}/d1")
    with pytest.raises(FileExistsError):
        client.mkdir(f"{tree}/d1/x", exist_ok=True)
    # makedirs as os.makedirs: the leaf existing is an error unless exist_ok.
    with pytest.raises(FileExistsError):
        client.makedirs(f"{tree}/d1/d2")
    client.makedirs(f"{tree}/d1/d2", exist_ok=True)
    client.makedirs(f"{tree}/n1/n2/n3")
    assert client.isdir(f"{tree}/n1/n2/n3")


def test_rename_and_remove(client, tree):
    client.write(f"{tree}/a", b"1")
    client.rename(f"{tree}/a", f"{tree}/b")
    assert not client.exists(f"{tree}/a")
    assert client.fetch(f"{tree}/b") == b"1"
    client.mkdir(f"{tree}/dir/sub", parents=True)
    client.write(f"{tree}/dir/sub/f", b"f")
    with pytest.raises(OSError) as e:
        client.remove(f"{tree}/dir")
    assert e.value.errno == errno.ENOTEMPTY
    client.remove(f"{tree}/dir", recursive=True)
    assert not client.exists(f"{tree}/dir")
    client.remove(f"{tree}/b")
    assert client.listdir(tree) == []


def test_open_gives_python_file_objects(client, tree):
    p = f"{tree}/t.txt"
    with client.open(p, "w") as f:
        f.write("line one\n")
        f.write("line two\n")
    with client.open(p) as f:
        assert f.readline() == "line one\n"
        assert list(f) == ["line two\n"]
    with client.open(p, "a") as f:
        f.write("three\n")
    assert client.fetch(p) == b"line one\nline two\nthree\n"
    with client.open(p, "r+b") as f:
        f.seek(5)
        f.write(b"ONE")
        f.seek(0)
        assert f.read(8) == b"line ONE"
        f.seek(-6, os.SEEK_END)
        assert f.read() == b"three\n"
    with client.open(p, "wb") as f:
        assert f.tell() == 0
    assert client.fetch(p) == b""
    with pytest.raises(FileExistsError):
        client.open(p, "x")
    with pytest.raises(ValueError):
        client.open(p, "rw")
    # A big write goes through the buffer in pieces and reads back whole.
    data = os.urandom(6 * 1024 * 1024)
    with client.open(f"{tree}/big", "wb") as f:
        for i in range(0, len(data), 65536):
            f.write(data[i:i + 65536])
    assert client.fetch(f"{tree}/big") == data


def test_errors_are_pythons_own(client, tree):
    with pytest.raises(FileNotFoundError) as e:
        client.fetch(f"{tree}/missing")
    assert e.value.errno == errno.ENOENT and e.value.filename == f"{tree}/missing"
    with pytest.raises(FileNotFoundError):
        client.stat(f"{tree}/no/such/dir")
    client.mkdir(f"{tree}/d")
    with pytest.raises(IsADirectoryError):
        client.fetch(f"{tree}/d")
    client.write(f"{tree}/f", b"")
    with pytest.raises(NotADirectoryError):
        client.listdir(f"{tree}/f")
    with pytest.raises(NotADirectoryError):
        client.write(f"{tree}/f/under", b"x")
    with pytest.raises(FileExistsError):
        client.mkdir(f"{tree}/f")
    with pytest.raises(OSError) as e:
        client.write(f"{tree}/" + "n" * 300, b"x")
    assert e.value.errno == errno.ENAMETOOLONG
    with pytest.raises(ValueError):
        client.fetch("relative/path")
    with pytest.raises(FileNotFoundError):
        myriad.Client("/nonexistent/cluster.json")


def test_permissions_are_enforced_for_another_user(client, cluster, tree):
    """A file of mode 0600 owned by root is refused to another user: PermissionError; one
    of mode 0644 is read."""
    import pathlib
    import shutil
    import subprocess
    import tempfile

    system_python = "/usr/bin/python3"
    if os.getuid() != 0 or not os.path.exists(system_python):
        pytest.skip("needs root (to act as another user) and a system python3 it may run")
    client.chmod(tree, 0o755)
    client.write(f"{tree}/secret", b"s", mode=0o600)
    client.write(f"{tree}/open", b"o", mode=0o644)
    client.mkdir(f"{tree}/shared", mode=0o777)
    client.chmod(f"{tree}/shared", 0o777)
    # The other user gets the client key (the cluster secret would make it root) and a
    # copy of the package (this interpreter's site-packages may be closed to it).
    # (pytest's tmp_path sits under a directory only root may enter.)
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="myriad-py-"))
    os.chmod(tmp_path, 0o755)
    shutil.copytree(pathlib.Path(myriad.__file__).parent, tmp_path / "myriad")
    key = tmp_path / "client.key"
    shutil.copy(pathlib.Path(cluster).with_name("client.key"), key)
    os.chown(key, 65534, 65534)
    shutil.copy(cluster, tmp_path / "cluster.json")
    script = (
        "import myriad, sys\n"
        "c = myriad.Client(sys.argv[1], sys.argv[2])\n"
        f"print(c.fetch('{tree}/open').decode())\n"
        "try:\n"
        f"    c.fetch('{tree}/secret')\n"
        "except PermissionError as e:\n"
        "    print('refused', e.errno)\n"
        "try:\n"
        f"    c.write('{tree}/new', b'x')\n"
        "except PermissionError:\n"
        "    print('refused')\n"
        # Its own read-only file: open() for writing is refused, as POSIX refuses it,
        # and the contents stay.
        f"c.write('{tree}/shared/mine', b'keep')\n"
        f"c.chmod('{tree}/shared/mine', 0o444)\n"
        "for mode in ('w', 'a', 'r+'):\n"
        "    try:\n"
        f"        c.open('{tree}/shared/mine', mode).close()\n"
        "        print('opened', mode)\n"
        "    except PermissionError:\n"
        "        pass\n"
        f"print(c.fetch('{tree}/shared/mine').decode())\n"
    )
    out = subprocess.run(
        [system_python, "-c", script, str(tmp_path / "cluster.json"), str(key)],
        user=65534, group=65534, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(tmp_path)}, cwd=tmp_path,
    )
    shutil.rmtree(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["o", "refused 13", "refused", "keep"], out.stdout


def test_new_directories_and_files_take_the_umask(client, cluster, tree):
    """As os.mkdir, os.makedirs and open(): the mode asked for (0o777 for directories,
    0o666 for files by default) masked by the process umask, never world-writable by
    accident; fsspec's makedirs and pipe the same."""
    import fsspec

    old = os.umask(0o027)
    try:
        client.mkdir(f"{tree}/d")
        client.makedirs(f"{tree}/a/b/c")
        client.mkdir(f"{tree}/m", mode=0o775)
        client.write(f"{tree}/f", b"x")
        client.write_many({f"{tree}/g": b"y"})
        with client.open(f"{tree}/h", "w") as f:
            f.write("z")
        fs = fsspec.filesystem("myriad", cluster=cluster)
        fs.makedirs(f"{tree}/fs/x")
        fs.pipe_file(f"{tree}/fs/p", b"p")
    finally:
        os.umask(old)
    modes = {p: client.stat(f"{tree}/{p}").st_mode & 0o7777
             for p in ("d", "a", "a/b", "a/b/c", "m", "f", "g", "h", "fs", "fs/x", "fs/p")}
    assert modes == {"d": 0o750, "a": 0o750, "a/b": 0o750, "a/b/c": 0o750, "m": 0o750,
                     "f": 0o640, "g": 0o640, "h": 0o640, "fs": 0o750, "fs/x": 0o750,
                     "fs/p": 0o640}, {k: oct(v) for k, v in modes.items()}


def test_symlinks_are_followed_where_python_follows_them(client, cluster, tree):
    """fetch, read, fetch_many, open, stat, listdir and fsspec's cat follow symbolic
    links (in the path too), as os and open() do; lstat and readlink show the link; a
    dangling link is FileNotFoundError, a loop ELOOP; remove takes the link, not what it
    names."""
    import errno

    import fsspec

    client.write(f"{tree}/target", b"data")
    client.mkdir(f"{tree}/d")
    client.write(f"{tree}/d/inner", b"in")
    client.symlink("target", f"{tree}/rel")
    client.symlink(f"{tree}/target", f"{tree}/abs")
    client.symlink("d", f"{tree}/dl")
    client.symlink("missing", f"{tree}/dangling")
    client.symlink("loop2", f"{tree}/loop1")
    client.symlink("loop1", f"{tree}/loop2")
    assert client.fetch(f"{tree}/rel") == b"data"
    assert client.fetch(f"{tree}/abs") == b"data"
    assert client.read(f"{tree}/rel", 1, 2) == b"at"
    assert client.fetch(f"{tree}/dl/inner") == b"in"
    assert client.fetch_many([f"{tree}/rel", f"{tree}/dl/inner"]) == [b"data", b"in"]
    with client.open(f"{tree}/abs", "rb") as f:
        assert f.read() == b"data"
    st = client.stat(f"{tree}/rel")
    assert (st.kind, st.st_size) == ("file", 4)
    assert client.lstat(f"{tree}/rel").kind == "symlink"
    assert client.stat(f"{tree}/rel", follow_symlinks=False).kind == "symlink"
    assert client.readlink(f"{tree}/rel") == "target"
    assert client.listdir(f"{tree}/dl") == ["inner"]
    assert client.isdir(f"{tree}/dl")
    with pytest.raises(FileNotFoundError):
        client.fetch(f"{tree}/dangling")
    with pytest.raises(OSError) as e:
        client.fetch(f"{tree}/loop1")
    assert e.value.errno == errno.ELOOP
    fs = fsspec.filesystem("myriad", cluster=cluster)
    assert fs.cat(f"{tree}/rel") == b"data"
    info = fs.info(f"{tree}/rel")
    assert (info["type"], info["size"], info["islink"], info["destination"]) == (
        "file", 4, True, "target")
    client.remove(f"{tree}/dl")
    assert client.isdir(f"{tree}/d") and client.fetch(f"{tree}/d/inner") == b"in"
    assert not client.exists(f"{tree}/dl")


def test_fetch_many_keeps_order_and_reports_errors(client, tree):
    paths = [f"{tree}/f{i}" for i in range(300)]
    for i, p in enumerate(paths):
        client.write(p, str(i).encode() * (i % 7 + 1))
    got = client.fetch_many(paths)
    assert got == [str(i).encode() * (i % 7 + 1) for i in range(300)]
    mixed = [paths[0], f"{tree}/missing", paths[1]]
    with pytest.raises(FileNotFoundError):
        client.fetch_many(mixed)
    r = client.fetch_many(mixed, on_error="return")
    assert r[0] == b"0" and isinstance(r[1], FileNotFoundError) and r[2] == b"11"
    assert client.fetch_many(mixed, on_error="omit") == [b"0", None, b"11"]
    with pytest.raises(ValueError):
        client.fetch_many(mixed, on_error="ignore")


def test_threads_share_one_client(client, tree):
    """Calls release the GIL: threads writing and reading at once all succeed."""
    errors = []

    def work(t):
        try:
            for i in range(40):
                p = f"{tree}/t{t}-{i}"
                client.write(p, p.encode())
                assert client.fetch(p) == p.encode()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(client.listdir(tree)) == 320


def test_a_forked_child_uses_the_client(client, tree):
    """A DataLoader worker forks: the child makes its own connections and reads."""
    client.write(f"{tree}/shared", b"from the parent")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            data = client.fetch(f"{tree}/shared")
            client.write(f"{tree}/child", b"from the child")
            os.write(w, data)
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100)
    os.waitpid(pid, 0)
    assert got == b"from the parent"
    assert client.fetch(f"{tree}/child") == b"from the child"


def test_100k_small_samples_with_fetch_many(client, tree):
    """A data-loading loop: 100,000 samples of 64-200 bytes, read in batches."""
    n = 100_000
    names = [f"{tree}/s{i // 1000:03d}/{i:06d}" for i in range(n)]
    for d in range(n // 1000):
        client.mkdir(f"{tree}/s{d:03d}")

    def sample(i):
        return (f"sample {i} " * 20).encode()[: 64 + i % 137]

    for start in range(0, n, 10_000):
        client.write_many([(names[i], sample(i)) for i in range(start, start + 10_000)])
    seen = 0
    for start in range(0, n, 4096):
        batch = names[start:start + 4096]
        for i, data in enumerate(client.fetch_many(batch), start):
            assert data == sample(i), names[i]
            seen += 1
    assert seen == n


def test_a_client_from_server_addresses(cluster, tree, monkeypatch):
    """Client("h1:7401,h2:7401", key) asks any of those servers for the map (no map file),
    and fsspec reaches the same cluster from a myriad://h1:7401/path URL."""
    import json
    import pathlib

    import fsspec

    nodes = json.loads(pathlib.Path(cluster).read_text())["nodes"]
    key = str(pathlib.Path(cluster).with_name("client.key"))
    # The first address is no server at all: the next one answers.
    addrs = "127.0.0.1:1," + ",".join(n["addr"] for n in nodes)
    c = myriad.Client(addrs, key)
    c.write(f"{tree}/by-address", b"seeded")
    assert c.fetch(f"{tree}/by-address") == b"seeded"
    with pytest.raises(ValueError, match="no cluster key"):
        myriad.Client(nodes[0]["addr"])
    monkeypatch.setenv("MYRIAD_SECRET_FILE", key)
    url = f"myriad://{nodes[1]['addr']}{tree}/by-address"
    with fsspec.open(url, "rb") as f:
        assert f.read() == b"seeded"


def _fetch_in_worker(c, path):
    """Runs in a process started with `spawn`: the client arrived pickled."""
    return c.fetch(path)


def test_a_client_pickles_and_connects_again_where_it_is_loaded(client, cluster, tree):
    import multiprocessing
    import pickle

    client.write(f"{tree}/p", b"pickled")
    copy = pickle.loads(pickle.dumps(client))
    assert copy.fetch(f"{tree}/p") == b"pickled"
    for method in ["spawn", "forkserver"]:
        with multiprocessing.get_context(method).Pool(2) as pool:
            assert pool.starmap(_fetch_in_worker, [(client, f"{tree}/p")] * 2) == [b"pickled"] * 2
    with myriad.Client(cluster) as c:
        assert c.fetch(f"{tree}/p") == b"pickled"


def test_posix_calls_beyond_whole_files(client, tree):
    import os as _os

    f = f"{tree}/f"
    client.write(f, b"0123456789")
    client.truncate(f, 4)
    assert client.fetch(f) == b"0123"
    client.truncate(f, 6)
    assert client.fetch(f) == b"0123\0\0"
    client.utime(f, (1_000_000_000.5, 1_100_000_000.25))
    st = client.stat(f)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000_500_000_000, 1_100_000_000_250_000_000)
    client.utime(f, ns=(5, 7))
    assert client.stat(f).st_mtime_ns == 7
    client.utime(f)
    assert client.stat(f).st_mtime > 1_700_000_000
    client.chown(f, 1234, -1)
    assert (client.stat(f).st_uid, client.stat(f).st_gid) == (1234, 0)
    client.link(f, f"{tree}/g")
    assert client.stat(f).st_nlink == 2 and client.fetch(f"{tree}/g") == b"0123\0\0"
    assert client.access(f, _os.R_OK | _os.W_OK) and client.access(f, _os.F_OK)
    assert not client.access(f"{tree}/missing", _os.F_OK)
    client.setxattr(f, "user.color", b"blue")
    assert client.getxattr(f, "user.color") == b"blue"
    assert "user.color" in client.listxattr(f)
    with pytest.raises(FileExistsError):
        client.setxattr(f, "user.color", b"red", _os.XATTR_CREATE)
    client.removexattr(f, "user.color")
    with pytest.raises(OSError) as e:
        client.getxattr(f, "user.color")
    assert e.value.errno == errno.ENODATA
    assert client.isfile(f) and not client.isfile(tree) and not client.isfile(f"{tree}/none")
    big = _os.urandom(5 * 1024 * 1024 + 3)
    client.write(f"{tree}/big", big)
    assert client.copy(f"{tree}/big", f"{tree}/big.copy") == len(big)
    assert client.fetch(f"{tree}/big.copy") == big
    client.write(f"{tree}/small", b"x")
    client.copy(f"{tree}/small", f"{tree}/big.copy")
    assert client.fetch(f"{tree}/big.copy") == b"x"
    with pytest.raises(OSError):
        client.copy(f"{tree}/small", f"{tree}/small")
    assert client.fetch(f"{tree}/small") == b"x"
    with pytest.raises(TypeError, match="encode"):
        client.write(f, "text")


def test_the_package_says_its_version_and_ships_types():
    import pathlib

    assert myriad.__version__ not in ("0.0.0", "0+unknown")
    here = pathlib.Path(myriad.__file__).parent
    assert (here / "py.typed").exists() and (here / "_native.pyi").exists()

