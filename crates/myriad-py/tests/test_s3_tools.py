"""Real S3 tools with their default settings (checksums on) against the gateway: s3cmd,
rclone and awscli upload, download, sync, copy on the servers and delete a tree of small
and large files, and every byte is compared. The tools come from the test environment
(scripts/test-python.sh installs s3cmd and awscli into it; rclone is Debian's)."""

import filecmp
import os
import random
import shutil
import subprocess
import sys
import urllib.parse

import pytest

from conftest import ACCESS, MIB, SECRET


def tool(name):
    """The tool's path: beside this Python (the test environment), else on PATH. Missing:
    the test fails where the test script promises the tools, else it is skipped."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    found = here if os.access(here, os.X_OK) else shutil.which(name)
    if found is None:
        if os.environ.get("MYRIAD_REQUIRE_S3_TOOLS"):
            pytest.fail(f"{name} is not installed")
        pytest.skip(f"{name} is not installed")
    return found


def run(argv, env=None, timeout=600):
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, (argv, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout + done.stderr


@pytest.fixture
def tree(tmp_path):
    """A local tree: small files in nested directories, one empty, one of 20 MiB (past the
    tools' multipart thresholds: s3cmd 15 MiB, awscli 8 MiB)."""
    root = tmp_path / "tree"
    rng = random.Random(7)
    for i in range(24):
        d = root / f"d{i % 3}" / f"e{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_bytes(rng.randbytes(rng.randint(1, 200_000)))
    (root / "empty").write_bytes(b"")
    (root / "big.bin").write_bytes(os.urandom(20 * MIB + 7))
    return root


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    assert not cmp.left_only and not cmp.right_only, (cmp.left_only, cmp.right_only)
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
    for sub in cmp.common_dirs:
        same_tree(a / sub, b / sub)


def test_s3cmd_round_trips_syncs_and_copies(endpoint, tree, tmp_path, client):
    host = urllib.parse.urlparse(endpoint).netloc
    cfg = tmp_path / "s3cfg"
    cfg.write_text(f"""[default]
access_key = {ACCESS}
secret_key = {SECRET}
host_base = {host}
host_bucket = {host}
use_https = False
signature_v2 = False
""")
    s3cmd = [tool("s3cmd"), "-c", str(cfg)]
    run(s3cmd + ["mb", "s3://s3cmd-b"])
    out = run(s3cmd + ["put", "--recursive", f"{tree}/", "s3://s3cmd-b/up/"])
    assert "MD5" not in out, out
    down = tmp_path / "down"
    down.mkdir()
    out = run(s3cmd + ["get", "--recursive", "s3://s3cmd-b/up/", f"{down}/"])
    assert "MD5" not in out, out
    same_tree(tree, down)
    # A second sync finds every file the same (sizes and MD5s from the listing).
    out = run(s3cmd + ["sync", f"{tree}/", "s3://s3cmd-b/up/"])
    assert "upload:" not in out, out
    run(s3cmd + ["cp", "s3://s3cmd-b/up/big.bin", "s3://s3cmd-b/copied/big.bin"])
    run(s3cmd + ["get", "s3://s3cmd-b/copied/big.bin", str(tmp_path / "big.copy")])
    assert filecmp.cmp(tree / "big.bin", tmp_path / "big.copy", shallow=False)
    run(s3cmd + ["del", "--recursive", "--force", "s3://s3cmd-b/"])
    run(s3cmd + ["rb", "s3://s3cmd-b"])
    assert "s3cmd-b" not in client.listdir("/")


def rclone_env(endpoint, tmp_path):
    env = dict(os.environ)
    # The gateway serves plain HTTP; rclone's AWS SDK refuses to start with a CA bundle
    # named in the environment ("HTTPClient's transport unsupported type").
    env.pop("AWS_CA_BUNDLE", None)
    env.update({
        "RCLONE_CONFIG": str(tmp_path / "rclone.conf"),
        "RCLONE_CONFIG_MYR_TYPE": "s3",
        "RCLONE_CONFIG_MYR_PROVIDER": "Other",
        "RCLONE_CONFIG_MYR_ACCESS_KEY_ID": ACCESS,
        "RCLONE_CONFIG_MYR_SECRET_ACCESS_KEY": SECRET,
        "RCLONE_CONFIG_MYR_ENDPOINT": endpoint,
        "RCLONE_CONFIG_MYR_REGION": "us-east-1",
    })
    return env


def test_rclone_round_trips_checks_and_copies(endpoint, tree, tmp_path, client):
    env = rclone_env(endpoint, tmp_path)
    rclone = [tool("rclone")]
    run(rclone + ["mkdir", "myr:rclone-b"], env)
    run(rclone + ["copy", str(tree), "myr:rclone-b/tree"], env)
    # `check` compares sizes and MD5s (the ETags) of every file.
    run(rclone + ["check", str(tree), "myr:rclone-b/tree"], env)
    down = tmp_path / "down"
    run(rclone + ["copy", "myr:rclone-b/tree", str(down)], env)
    same_tree(tree, down)
    # A second sync transfers nothing: modification times come back from the metadata.
    out = run(rclone + ["sync", "-v", str(tree), "myr:rclone-b/tree"], env)
    assert "Copied" not in out, out
    # Server-side copies, within a bucket and to another.
    run(rclone + ["copyto", "myr:rclone-b/tree/big.bin", "myr:rclone-c/big.bin"], env)
    run(rclone + ["copy", "myr:rclone-b/tree/d0", "myr:rclone-c/d0"], env)
    run(rclone + ["check", str(tree / "d0"), "myr:rclone-c/d0"], env)
    run(rclone + ["md5sum", "myr:rclone-c"], env)
    run(rclone + ["copyto", "myr:rclone-c/big.bin", str(tmp_path / "big.copy")], env)
    assert filecmp.cmp(tree / "big.bin", tmp_path / "big.copy", shallow=False)
    run(rclone + ["purge", "myr:rclone-c"], env)
    run(rclone + ["delete", "myr:rclone-b"], env)
    run(rclone + ["rmdirs", "myr:rclone-b"], env)
    assert "rclone-c" not in client.listdir("/")
    assert "rclone-b" not in client.listdir("/")


def test_awscli_copies_moves_and_syncs_between_buckets(endpoint, tree, tmp_path):
    cfg = tmp_path / "aws-config"
    cfg.write_text("[default]\nregion = us-east-1\ns3 =\n    addressing_style = path\n")
    env = dict(os.environ)
    env.update({
        "AWS_CONFIG_FILE": str(cfg),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_ACCESS_KEY_ID": ACCESS,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    })
    aws = [tool("aws"), "--endpoint-url", endpoint, "s3"]
    run(aws + ["mb", "s3://aws-a"], env)
    run(aws + ["mb", "s3://aws-b"], env)
    run(aws + ["cp", "--recursive", str(tree), "s3://aws-a/tree"], env)
    # Copies between S3 locations: CopyObject, and UploadPartCopy for the 20 MiB file.
    run(aws + ["cp", "s3://aws-a/tree/big.bin", "s3://aws-b/big.bin"], env)
    run(aws + ["sync", "s3://aws-a/tree", "s3://aws-b/tree"], env)
    run(aws + ["mv", "s3://aws-b/tree/d1/e1/f1.txt", "s3://aws-b/moved/f1.txt"], env)
    down = tmp_path / "down"
    run(aws + ["cp", "--recursive", "s3://aws-b/tree", str(down)], env)
    os.makedirs(down / "d1" / "e1", exist_ok=True)
    run(aws + ["cp", "s3://aws-b/moved/f1.txt", str(down / "d1" / "e1" / "f1.txt")], env)
    same_tree(tree, down)
    run(aws + ["cp", "s3://aws-b/big.bin", str(tmp_path / "big.copy")], env)
    assert filecmp.cmp(tree / "big.bin", tmp_path / "big.copy", shallow=False)
    run(aws + ["rm", "--recursive", "s3://aws-b"], env)
    run(aws + ["rb", "s3://aws-b"], env)
