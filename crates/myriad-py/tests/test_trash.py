"""The trash (`myriad trash`, docs/trash.md) as Python and S3 clients meet it: with the
trash on, a file removed by the package, an object deleted through the S3 gateway or
written over is kept in /.trash and `myriad trash restore` gives it back byte for byte."""

import time

import pytest

from conftest import map_command

pytest.importorskip("boto3")


def trash(cluster, *args):
    """`myriad trash ARGS` against the test cluster; its output."""
    return map_command(cluster, "trash", *args)


def kept(cluster, path, want=True):
    """Whether `trash list` shows `path`, waiting (at most 10 s) for every server to
    follow the map that turned the trash on."""
    deadline = time.monotonic() + 10
    while True:
        listed = trash(cluster, "list")
        shown = any(line.endswith(" " + path) for line in listed.splitlines())
        if shown == want or time.monotonic() > deadline:
            return shown
        time.sleep(0.1)


def test_a_removed_file_and_a_deleted_object_are_kept_and_restored(
        cluster, client, tree, s3, bucket):
    trash(cluster, "days", "3")
    try:
        body = bytes(range(256)) * 40
        client.write(f"{tree}/kept.bin", body)
        client.remove(f"{tree}/kept.bin")
        with pytest.raises(OSError):
            client.read(f"{tree}/kept.bin")
        assert kept(cluster, f"{tree}/kept.bin")
        s3.put_object(Bucket=bucket, Key="dir/obj", Body=b"object bytes")
        s3.delete_object(Bucket=bucket, Key="dir/obj")
        assert kept(cluster, f"/{bucket}/dir/obj")

        # An object written over keeps the version it replaced (the gateway renames
        # the new one over the key).
        s3.put_object(Bucket=bucket, Key="dir/over", Body=b"first version")
        s3.put_object(Bucket=bucket, Key="dir/over", Body=b"second version")
        assert kept(cluster, f"/{bucket}/dir/over")
        trash(cluster, "restore", f"/{bucket}/dir/over", "--to", f"/{bucket}/dir/over.old")
        old = s3.get_object(Bucket=bucket, Key="dir/over.old")["Body"].read()
        assert old == b"first version"
        now = s3.get_object(Bucket=bucket, Key="dir/over")["Body"].read()
        assert now == b"second version"

        assert "restored 1 file(s)" in trash(cluster, "restore", f"{tree}/kept.bin")
        assert client.read(f"{tree}/kept.bin") == body
        trash(cluster, "restore", f"/{bucket}/dir/obj")
        got = s3.get_object(Bucket=bucket, Key="dir/obj")["Body"].read()
        assert got == b"object bytes"
        assert not kept(cluster, f"{tree}/kept.bin", want=False)
    finally:
        trash(cluster, "days", "0")
        trash(cluster, "purge")
