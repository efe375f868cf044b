"""A real local cluster for the package's tests: `myriad cluster up` with the workspace's
own binary ($MYRIAD_BIN, else target/debug/myriad, else target/release/myriad)."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def myriad_bin():
    given = os.environ.get("MYRIAD_BIN")
    if given:
        return given
    for profile in ("debug", "release"):
        p = ROOT / "target" / profile / "myriad"
        if p.exists():
            return str(p)
    raise RuntimeError("no myriad binary: run `cargo build` first or set MYRIAD_BIN")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The cluster map file of a 3-server cluster (serving metrics), stopped after the
    session."""
    data = tmp_path_factory.mktemp("cluster")
    up = subprocess.run(
        [myriad_bin(), "cluster", "up", "--nodes", "3", "--metrics", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=120,
    )
    assert up.returncode == 0, up.stderr
    yield str(data / "cluster.json")
    subprocess.run([myriad_bin(), "cluster", "down", "--data-dir", str(data)],
                   capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def client(cluster):
    import myriad

    return myriad.Client(cluster)


@pytest.fixture
def tree(client, request):
    """A fresh directory for one test."""
    path = f"/t/{request.node.name}"
    client.mkdir(path, parents=True)
    return path
