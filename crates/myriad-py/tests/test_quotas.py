"""Directory quotas (`myriad quota`, docs/quotas.md) as Python and S3 clients meet them:
a change past a limit is `OSError(errno.EDQUOT)` from the package and `QuotaExceeded`
(HTTP 403) from the S3 gateway, whichever partition the names land on."""

import errno

import pytest

from conftest import error_code, map_command

pytest.importorskip("boto3")
from botocore.exceptions import ClientError  # noqa: E402


def quota(cluster, *args):
    """`myriad quota ARGS` against the test cluster; its output."""
    return map_command(cluster, "quota", *args)


def test_a_write_past_a_quota_is_oserror_edquot(cluster, client, tree):
    q = f"{tree}/q"
    client.mkdir(q)
    quota(cluster, "set", q, "--files", "6")
    client.mkdir(f"{q}/d")
    for i in range(5):
        client.write(f"{q}/d/f{i}" if i % 2 else f"{q}/f{i}", b"x")
    with pytest.raises(OSError) as e:
        client.write(f"{q}/one-more", b"x")
    assert e.value.errno == errno.EDQUOT
    assert "files 6 of 6 (100%)" in quota(cluster, "get", q)
    # Freed, a name is taken again; outside the tree nothing is limited.
    client.remove(f"{q}/f0")
    client.write(f"{q}/again", b"x")
    client.write(f"{tree}/outside", b"x" * 1000)
    quota(cluster, "clear", q)
    client.write(f"{q}/after-clear", b"x")


def test_an_s3_put_past_a_quota_is_quota_exceeded(cluster, s3, bucket):
    quota(cluster, "set", f"/{bucket}", "--bytes", "1K")
    s3.put_object(Bucket=bucket, Key="a", Body=b"x" * 1000)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="b", Body=b"x" * 100)
    assert error_code(e) == "QuotaExceeded"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    s3.put_object(Bucket=bucket, Key="c", Body=b"x" * 24)
    quota(cluster, "clear", f"/{bucket}")
