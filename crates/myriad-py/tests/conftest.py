"""A real local cluster for the package's tests: `myriad cluster up` with the workspace's
own binary ($MYRIAD_BIN, else target/debug/myriad, else target/release/myriad)."""

import contextlib
import hashlib
import os
import pathlib
import re
import subprocess
import time

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


# The S3 gateway (test_s3.py, test_s3_tools.py).

ACCESS, SECRET = "AKIAMYRIADTEST", "myriad-test-secret"
MIB = 1024 * 1024


@contextlib.contextmanager
def gateway(cluster, home, keys, extra=()):
    """An S3 gateway serving `cluster` with `keys` (credentials file lines) and `extra`
    arguments, its URL; its log in `home`/stderr."""
    creds = home / "credentials"
    creds.write_text("# test keys\n" + "".join(f"{k}\n" for k in keys))
    creds.chmod(0o600)
    # The gateway's log goes to a file: a pipe nobody reads could fill and stop it.
    log = open(home / "stderr", "w")
    proc = subprocess.Popen(
        [myriad_bin(), "s3", "--cluster", cluster, "--listen", "127.0.0.1:0",
         "--credentials", str(creds), *extra],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("s3: http://"), (line, proc.poll())
        yield line.split()[1]
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


@pytest.fixture(scope="session")
def endpoint(cluster, tmp_path_factory):
    """The URL of an S3 gateway serving `cluster` with one key (acting as the gateway's
    own user), stopped after the session."""
    with gateway(cluster, tmp_path_factory.mktemp("s3"), [f"{ACCESS} {SECRET}"]) as url:
        yield url


def s3_client(endpoint, access=ACCESS, secret=SECRET):
    import boto3
    import botocore.config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access,
        aws_secret_access_key=secret, region_name="us-east-1",
        config=botocore.config.Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}),
    )


@pytest.fixture(scope="session")
def s3(endpoint):
    return s3_client(endpoint)


@pytest.fixture
def bucket(s3, request):
    """A fresh bucket for one test."""
    node = request.node.name
    short = re.sub(r"[^a-z0-9]+", "-", node.lower())[:40].strip("-")
    name = f"t-{short}-{hashlib.sha1(node.encode()).hexdigest()[:8]}"
    s3.create_bucket(Bucket=name)
    return name


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def map_command(cluster, *args):
    """`myriad ARGS` against the test cluster (a command that changes the cluster map);
    its output. Such a change is refused until the cluster's protocol floor rose (a
    second or so after it started): tried again meanwhile."""
    deadline = time.monotonic() + 20
    while True:
        r = subprocess.run([myriad_bin(), "--cluster", cluster, *args],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return r.stdout
        assert "floor" in r.stderr and time.monotonic() < deadline, r.stderr
        time.sleep(0.2)
