"""fsspec, pandas and Dask-style access through myriad:// against a real cluster."""

import fsspec
import pytest


@pytest.fixture
def fs(cluster):
    return fsspec.filesystem("myriad", cluster=cluster)


def test_the_protocol_is_registered_by_entry_point():
    from fsspec.registry import get_filesystem_class

    import myriad.fsspec

    assert get_filesystem_class("myriad") is myriad.fsspec.MyriadFileSystem


def test_pandas_reads_and_writes_csv_through_myriad_urls(cluster, client, tree, monkeypatch):
    pd = pytest.importorskip("pandas")
    monkeypatch.setenv("MYRIAD_CLUSTER", cluster)
    client.write(f"{tree}/in.csv", b"name,count\nalpha,1\nbeta,22\ngamma,333\n")
    df = pd.read_csv(f"myriad://{tree}/in.csv")
    assert list(df["name"]) == ["alpha", "beta", "gamma"]
    assert df["count"].sum() == 356
    df["double"] = df["count"] * 2
    df.to_csv(f"myriad://{tree}/out.csv", index=False)
    back = pd.read_csv(f"myriad://{tree}/out.csv", storage_options={"cluster": cluster})
    assert list(back["double"]) == [2, 44, 666]


def test_fsspec_open_ls_info_find_glob(fs, client, tree):
    fs.makedirs(f"{tree}/a", exist_ok=True)
    with fsspec.open(f"myriad://{tree}/a/b.txt", "w", **fs.storage_options) as f:
        f.write("hel")
    with fsspec.open(f"myriad://{tree}/a/b.txt", "rb", **fs.storage_options) as f:
        assert f.read() == b"hel"
    with fs.open(f"{tree}/a/b.txt", "a") as f:
        f.write("lo")
    fs.pipe(f"{tree}/a/c.bin", b"\x00\x01")
    assert fs.cat(f"myriad://{tree}/a/b.txt") == b"hello"
    assert fs.cat_file(f"{tree}/a/b.txt", start=1, end=3) == b"el"
    assert fs.cat_file(f"{tree}/a/b.txt", start=-2) == b"lo"
    info = fs.info(f"{tree}/a/b.txt")
    assert info["type"] == "file" and info["size"] == 5
    assert fs.info(f"{tree}/a")["type"] == "directory"
    assert sorted(fs.ls(f"{tree}/a", detail=False)) == [f"{tree}/a/b.txt", f"{tree}/a/c.bin"]
    assert sorted(fs.find(tree)) == [f"{tree}/a/b.txt", f"{tree}/a/c.bin"]
    assert fs.glob(f"{tree}/a/*.txt") == [f"{tree}/a/b.txt"]
    assert fs.exists(f"{tree}/a/c.bin") and not fs.exists(f"{tree}/a/zzz")
    assert fs.isdir(f"{tree}/a") and fs.isfile(f"{tree}/a/b.txt")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{tree}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{tree}/nothing")


def test_cat_of_many_paths_is_one_batch(fs, client, tree):
    paths = [f"{tree}/p{i}" for i in range(50)]
    for i, p in enumerate(paths):
        client.write(p, bytes([i]) * i)
    got = fs.cat(paths)
    assert got == {p: bytes([i]) * i for i, p in enumerate(paths)}
    missing = paths[:2] + [f"{tree}/none"]
    assert set(fs.cat(missing, on_error="omit")) == set(paths[:2])
    assert isinstance(fs.cat(missing, on_error="return")[f"{tree}/none"], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat(missing)
    assert fs.fetch_many(paths[:3]) == [b"", b"\x01", b"\x02\x02"]


def test_mv_cp_rm(fs, client, tree):
    fs.pipe(f"{tree}/x", b"data")
    fs.mv(f"{tree}/x", f"{tree}/y")
    assert not fs.exists(f"{tree}/x") and fs.cat(f"{tree}/y") == b"data"
    fs.cp(f"{tree}/y", f"{tree}/z")
    assert fs.cat(f"{tree}/z") == b"data"
    fs.makedirs(f"{tree}/d/e")
    fs.pipe(f"{tree}/d/e/f", b"f")
    fs.rm(f"{tree}/d", recursive=True)
    assert not fs.exists(f"{tree}/d")
    fs.rm(f"{tree}/y")
    assert sorted(fs.ls(tree, detail=False)) == [f"{tree}/z"]


def test_a_dataset_loop_reads_through_fsspec(fs, client, tree):
    """The shape of an ML data loader: list a directory, read every sample."""
    for i in range(200):
        client.write(f"{tree}/{i:04d}.bin", i.to_bytes(4, "little") * 32)
    files = sorted(fs.ls(tree, detail=False))
    assert len(files) == 200
    batch = fs.cat(files)
    total = sum(int.from_bytes(batch[f][:4], "little") for f in files)
    assert total == sum(range(200))


def test_the_filesystem_pickles_as_dask_and_data_loader_workers_need(fs, client, tree):
    """Dask and multiprocessing data loaders ship filesystems to workers by pickling."""
    import pickle

    client.write(f"{tree}/p", b"pickled")
    again = pickle.loads(pickle.dumps(fs))
    assert again.cat(f"{tree}/p") == b"pickled"
    with fsspec.open(f"myriad://{tree}/p", "rb", **fs.storage_options) as f:
        opened = pickle.loads(pickle.dumps(fsspec.open(f"myriad://{tree}/p", **fs.storage_options)))
        assert f.read() == b"pickled"
    with opened as g:
        assert g.read() == b"pickled"


def test_files_opened_for_reading_are_fsspec_buffered_files(fs, client, tree):
    data = bytes(range(256)) * 400
    client.write(f"{tree}/blocks", data)
    with fs.open(f"{tree}/blocks", "rb", block_size=1000, cache_type="bytes") as f:
        assert f.size == len(data) and f.path == f"{tree}/blocks"
        f.seek(5000)
        assert f.read(10) == data[5000:5010]
    lines = b"a,b\n" * 1000
    client.write(f"{tree}/lines", lines)
    assert fs.read_block(f"{tree}/lines", 10, 20, delimiter=b"\n") == b"a,b\n" * 5
    fs.touch(f"{tree}/t")
    client.write(f"{tree}/t", b"keep")
    fs.touch(f"{tree}/t", truncate=False)
    assert client.fetch(f"{tree}/t") == b"keep"
    fs.touch(f"{tree}/t")
    assert client.fetch(f"{tree}/t") == b""
    fs.cp_file(f"{tree}/lines", f"{tree}/lines.copy")
    assert client.fetch(f"{tree}/lines.copy") == lines


def test_pandas_and_pyarrow_round_trip_parquet(cluster, client, tree, monkeypatch):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    monkeypatch.setenv("MYRIAD_CLUSTER", cluster)
    df = pd.DataFrame({"k": list(range(5000)), "v": [f"row {i}" for i in range(5000)]})
    df.to_parquet(f"myriad://{tree}/t.parquet")
    back = pd.read_parquet(f"myriad://{tree}/t.parquet")
    assert back.equals(df)
    # pyarrow reads the footer first: ranged reads through the buffered file.
    import pyarrow.parquet as pq

    import myriad.fsspec

    fs = myriad.fsspec.MyriadFileSystem(cluster=cluster)
    assert pq.read_table(f"{tree}/t.parquet", filesystem=fs).num_rows == 5000

