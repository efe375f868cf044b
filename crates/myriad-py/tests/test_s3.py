"""The S3 gateway (`myriad s3`, docs/s3.md) driven by boto3 against a real cluster: buckets
are top-level directories, objects files, keys with slashes paths."""

import base64
import datetime
import hashlib
import os
import subprocess

import pytest

from conftest import ACCESS, MIB, SECRET, error_code, gateway, myriad_bin, s3_client

pytest.importorskip("boto3")
from botocore.exceptions import ClientError  # noqa: E402

def test_buckets_are_top_level_directories(s3, client):
    s3.create_bucket(Bucket="t-buckets")
    assert client.stat("/t-buckets").is_dir()
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "t-buckets" in names
    assert not any(n.startswith(".") for n in names)
    s3.head_bucket(Bucket="t-buckets")
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket="t-buckets")
    assert error_code(e) == "BucketAlreadyOwnedByYou"
    s3.put_object(Bucket="t-buckets", Key="x", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket="t-buckets")
    assert error_code(e) == "BucketNotEmpty"
    s3.delete_object(Bucket="t-buckets", Key="x")
    s3.delete_bucket(Bucket="t-buckets")
    assert "t-buckets" not in client.listdir("/")
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket="t-buckets")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_put_get_head_delete(s3, client, bucket):
    small = os.urandom(1000)
    put = s3.put_object(Bucket=bucket, Key="dir/sub/small.bin", Body=small)
    got = s3.get_object(Bucket=bucket, Key="dir/sub/small.bin")
    assert got["Body"].read() == small
    head = s3.head_object(Bucket=bucket, Key="dir/sub/small.bin")
    assert head["ContentLength"] == len(small)
    assert put["ETag"] == got["ETag"] == head["ETag"]
    # The key is a path in the cluster.
    assert client.fetch(f"/{bucket}/dir/sub/small.bin") == small
    assert client.listdir(f"/{bucket}/dir") == ["sub"]
    part = s3.get_object(Bucket=bucket, Key="dir/sub/small.bin", Range="bytes=10-19")
    assert part["Body"].read() == small[10:20]
    assert part["ContentRange"] == f"bytes 10-19/{len(small)}"
    # Overwriting replaces the object, with a new ETag.
    s3.put_object(Bucket=bucket, Key="dir/sub/small.bin", Body=b"new")
    assert s3.get_object(Bucket=bucket, Key="dir/sub/small.bin")["Body"].read() == b"new"
    assert s3.head_object(Bucket=bucket, Key="dir/sub/small.bin")["ETag"] != put["ETag"]
    # DELETE removes the file and the directories the key implied, not the bucket.
    s3.delete_object(Bucket=bucket, Key="dir/sub/small.bin")
    assert client.listdir(f"/{bucket}") == []
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="dir/sub/small.bin")
    assert error_code(e) == "NoSuchKey"
    # Deleting what is not there succeeds, as in S3.
    s3.delete_object(Bucket=bucket, Key="dir/sub/small.bin")


def test_a_big_object_round_trips_in_pieces(s3, client, bucket):
    data = os.urandom(13 * MIB + 17)
    put = s3.put_object(Bucket=bucket, Key="big/object", Body=data)
    got = s3.get_object(Bucket=bucket, Key="big/object")
    assert got["ContentLength"] == len(data)
    assert got["Body"].read() == data
    assert got["ETag"] == put["ETag"]
    assert client.stat(f"/{bucket}/big/object").st_size == len(data)
    at = 4 * MIB - 3
    ranged = s3.get_object(Bucket=bucket, Key="big/object", Range=f"bytes={at}-{at + 5 * MIB}")
    assert ranged["Body"].read() == data[at:at + 5 * MIB + 1]
    tail = s3.get_object(Bucket=bucket, Key="big/object", Range="bytes=-10")
    assert tail["Body"].read() == data[-10:]
    # No temporary file is left beside it.
    assert client.listdir(f"/{bucket}/big") == ["object"]


def test_missing_keys_buckets_and_directories(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="missing")
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="t-no-such-bucket", Key="x")
    assert error_code(e) == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket="t-no-such-bucket", Key="a/b", Body=b"x")
    assert error_code(e) == "NoSuchBucket"
    s3.put_object(Bucket=bucket, Key="d/file", Body=b"x")
    # A key naming a directory (a prefix of other keys) is no object.
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="d")
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="d")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


@pytest.mark.parametrize("key", ["a/../b", "../escape", "a//b", "/lead", "trail/", "a/./b",
                                 "x/" + "n" * 256])
def test_keys_that_cannot_be_paths_are_refused(s3, client, bucket, key):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    assert error_code(e) in ("InvalidArgument", "KeyTooLongError")
    assert client.listdir(f"/{bucket}") == []
    assert "b" not in client.listdir("/") and "escape" not in client.listdir("/")


def test_list_with_prefix_and_delimiter(s3, bucket):
    keys = ["a-b", "a/b", "a/c/d", "a/c-e", "a0", "b/x", "top"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    every = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in every["Contents"]] == sorted(keys)
    assert every["KeyCount"] == len(keys) and not every["IsTruncated"]
    sizes = {o["Key"]: o["Size"] for o in every["Contents"]}
    assert sizes == {k: len(k) for k in keys}
    etag = s3.head_object(Bucket=bucket, Key="a/b")["ETag"]
    assert {o["Key"]: o["ETag"] for o in every["Contents"]}["a/b"] == etag

    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["a-b", "a0", "top"]
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/"]

    under_a = s3.list_objects_v2(Bucket=bucket, Prefix="a/", Delimiter="/")
    assert [o["Key"] for o in under_a["Contents"]] == ["a/b", "a/c-e"]
    assert [p["Prefix"] for p in under_a["CommonPrefixes"]] == ["a/c/"]

    starting_a = s3.list_objects_v2(Bucket=bucket, Prefix="a")
    assert [o["Key"] for o in starting_a["Contents"]] == ["a-b", "a/b", "a/c-e", "a/c/d", "a0"]

    after = s3.list_objects_v2(Bucket=bucket, StartAfter="a/c-e")
    assert [o["Key"] for o in after["Contents"]] == ["a/c/d", "a0", "b/x", "top"]

    none = s3.list_objects_v2(Bucket=bucket, Prefix="zzz")
    assert none["KeyCount"] == 0 and "Contents" not in none


def test_pagination_with_max_keys(s3, bucket):
    keys = sorted([f"p/{i:03d}" for i in range(7)] + [f"q{i}" for i in range(3)] + ["p-x"])
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"")
    seen, token, pages = [], None, 0
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=bucket, MaxKeys=3, **kw)
        pages += 1
        assert page["KeyCount"] <= 3
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == keys
    assert pages == 4
    # With a delimiter a common prefix is one item of a page and is not repeated.
    items, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=bucket, MaxKeys=1, Delimiter="/", **kw)
        items += [o["Key"] for o in page.get("Contents", [])]
        items += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert items == ["p-x", "p/", "q0", "q1", "q2"]
    # boto3's paginator agrees.
    paged = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 4}) for o in p.get("Contents", [])]
    assert paged == keys


def test_multipart_upload_of_three_parts(s3, client, bucket):
    parts = [os.urandom(5 * MIB + 11), os.urandom(5 * MIB), os.urandom(1234)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp/whole.bin")["UploadId"]
    etags = []
    for n, data in enumerate(parts, start=1):
        etags.append(s3.upload_part(Bucket=bucket, Key="mp/whole.bin", UploadId=up,
                                    PartNumber=n, Body=data)["ETag"])
    listed = s3.list_parts(Bucket=bucket, Key="mp/whole.bin", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed] == [
        (n, e, len(d)) for n, (e, d) in enumerate(zip(etags, parts), start=1)]
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp/whole.bin", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e}
                                   for n, e in enumerate(etags, start=1)]})
    assert done["ETag"].strip('"').endswith("-3")
    got = s3.get_object(Bucket=bucket, Key="mp/whole.bin")
    assert got["Body"].read() == b"".join(parts)
    assert got["ETag"] == done["ETag"]
    assert s3.head_object(Bucket=bucket, Key="mp/whole.bin")["ETag"] == done["ETag"]
    assert client.fetch(f"/{bucket}/mp/whole.bin") == b"".join(parts)
    assert client.listdir(f"/{bucket}/mp") == ["whole.bin"]
    assert up not in client.listdir("/.myriad-s3-uploads")
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key="mp/whole.bin", UploadId=up)
    assert error_code(e) == "NoSuchUpload"


def test_a_completion_checks_the_parts(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="k", UploadId=up, PartNumber=1, Body=b"a")["ETag"]
    for parts, code in [
        ([{"PartNumber": 1, "ETag": '"0123"'}], "InvalidPart"),
        ([{"PartNumber": 2, "ETag": e1}], "InvalidPart"),
    ]:
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=up,
                                         MultipartUpload={"Parts": parts})
        assert error_code(e) == code
    # An upload id is for its own key only.
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="other", UploadId=up, PartNumber=1, Body=b"a")
    assert error_code(e) == "NoSuchUpload"
    s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=up)


def test_an_aborted_upload_leaves_nothing(s3, client, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="gone/obj")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="gone/obj", UploadId=up, PartNumber=1, Body=b"x" * 1000)
    assert up in client.listdir("/.myriad-s3-uploads")
    s3.abort_multipart_upload(Bucket=bucket, Key="gone/obj", UploadId=up)
    assert up not in client.listdir("/.myriad-s3-uploads")
    assert client.listdir(f"/{bucket}") == []
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="gone/obj")
    assert error_code(e) == "NoSuchKey"


def test_delete_objects(s3, client, bucket):
    for k in ["d/1", "d/2", "e"]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "d/1"}, {"Key": "d/2"}, {"Key": "missing"}, {"Key": "a/../e"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d/1", "d/2", "missing"]
    assert [(x["Key"], x["Code"]) for x in r["Errors"]] == [("a/../e", "InvalidArgument")]
    assert client.listdir(f"/{bucket}") == ["e"]


def test_a_wrong_secret_is_refused(endpoint, bucket):
    bad = s3_client(endpoint, secret="not-the-secret")
    with pytest.raises(ClientError) as e:
        bad.list_objects_v2(Bucket=bucket)
    assert error_code(e) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as e:
        bad.put_object(Bucket=bucket, Key="x", Body=b"x")
    assert error_code(e) == "SignatureDoesNotMatch"


def test_an_unknown_access_key_is_refused(endpoint):
    with pytest.raises(ClientError) as e:
        s3_client(endpoint, access="AKIAUNKNOWN").list_buckets()
    assert error_code(e) == "InvalidAccessKeyId"


def test_a_credentials_file_others_may_read_is_refused(cluster, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text(f"{ACCESS} {SECRET}\n")
    creds.chmod(0o644)
    run = subprocess.run(
        [myriad_bin(), "s3", "--cluster", cluster, "--listen", "127.0.0.1:0",
         "--credentials", str(creds)],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode != 0
    assert "chmod 600" in run.stderr
    creds.write_text("# no keys\n")
    creds.chmod(0o600)
    run = subprocess.run(
        [myriad_bin(), "s3", "--cluster", cluster, "--listen", "127.0.0.1:0",
         "--credentials", str(creds)],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode != 0
    assert "no keys" in run.stderr


def md5(data):
    return hashlib.md5(data).hexdigest()


def quoted(etag):
    return f'"{etag}"'


def test_etags_are_the_md5_of_the_bytes(s3, client, bucket):
    small, big = os.urandom(1000), os.urandom(9 * MIB + 5)
    for key, data in [("small", small), ("big/one", big)]:
        put = s3.put_object(Bucket=bucket, Key=key, Body=data)
        assert put["ETag"] == quoted(md5(data))
        assert s3.head_object(Bucket=bucket, Key=key)["ETag"] == put["ETag"]
        assert s3.get_object(Bucket=bucket, Key=key)["ETag"] == put["ETag"]
    # Replacing an object (written beside it, renamed over it) gives the new bytes' MD5.
    put = s3.put_object(Bucket=bucket, Key="small", Body=b"hello")
    assert put["ETag"] == quoted("5d41402abc4b2a76b9719d911017c592")
    listed = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {"small": put["ETag"], "big/one": quoted(md5(big))}
    # Written through another client the MD5 is no longer known: an ETag that is no MD5.
    client.write(f"/{bucket}/small", b"other bytes")
    tag = s3.head_object(Bucket=bucket, Key="small")["ETag"]
    assert tag.strip('"').endswith("-1") and tag != put["ETag"]
    assert s3.get_object(Bucket=bucket, Key="small")["ETag"] == tag
    client.write(f"/{bucket}/mounted", b"never put")
    assert s3.head_object(Bucket=bucket, Key="mounted")["ETag"].strip('"').endswith("-1")


def test_a_content_md5_that_does_not_match_stores_nothing(s3, client, bucket):
    for data in [b"x" * 100, os.urandom(5 * MIB)]:
        wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="k", Body=data, ContentMD5=wrong)
        assert error_code(e) == "BadDigest"
        assert client.listdir(f"/{bucket}") == []
    right = base64.b64encode(hashlib.md5(b"y").digest()).decode()
    assert s3.put_object(Bucket=bucket, Key="k", Body=b"y", ContentMD5=right)["ETag"] == quoted(md5(b"y"))


def test_headers_and_metadata_are_kept(s3, bucket):
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    stored = dict(ContentType="text/csv", ContentEncoding="gzip", ContentLanguage="de",
                  ContentDisposition='attachment; filename="a.csv"', CacheControl="max-age=60",
                  Expires=expires, Metadata={"color": "blue", "Owner-Id": "42"})
    s3.put_object(Bucket=bucket, Key="a.csv", Body=b"1,2", **stored)
    for got in [s3.head_object(Bucket=bucket, Key="a.csv"), s3.get_object(Bucket=bucket, Key="a.csv")]:
        for k in ["ContentType", "ContentEncoding", "ContentLanguage", "ContentDisposition",
                  "CacheControl"]:
            assert got[k] == stored[k], k
        assert got["Expires"] == expires
        assert got["Metadata"] == {"color": "blue", "owner-id": "42"}
    # A GET's response-* parameters override what is stored.
    got = s3.get_object(Bucket=bucket, Key="a.csv", ResponseContentType="text/plain")
    assert got["ContentType"] == "text/plain"
    # Without any, S3's default type and no metadata.
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    got = s3.head_object(Bucket=bucket, Key="plain")
    assert got["ContentType"] == "binary/octet-stream" and got.get("Metadata", {}) == {}
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="fat", Body=b"x", Metadata={"m": "v" * 2100})
    assert error_code(e) == "MetadataTooLarge"


def test_conditional_gets_and_heads(s3, bucket):
    tag = s3.put_object(Bucket=bucket, Key="c", Body=b"cond")["ETag"]
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    for read in [s3.get_object, s3.head_object]:
        assert read(Bucket=bucket, Key="c", IfMatch=tag)["ETag"] == tag
        assert read(Bucket=bucket, Key="c", IfNoneMatch='"other"')["ETag"] == tag
        assert read(Bucket=bucket, Key="c", IfModifiedSince=past)["ETag"] == tag
        assert read(Bucket=bucket, Key="c", IfUnmodifiedSince=future)["ETag"] == tag
        for cond, status in [({"IfMatch": '"other"'}, 412), ({"IfUnmodifiedSince": past}, 412),
                             ({"IfNoneMatch": tag}, 304), ({"IfModifiedSince": future}, 304)]:
            with pytest.raises(ClientError) as e:
                read(Bucket=bucket, Key="c", **cond)
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == status, cond


def test_conditional_puts(s3, client, bucket):
    first = s3.put_object(Bucket=bucket, Key="once", Body=b"first", IfNoneMatch="*")["ETag"]
    for body in [b"second", os.urandom(5 * MIB)]:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="once", Body=body, IfNoneMatch="*")
        assert error_code(e) == "PreconditionFailed"
    assert client.fetch(f"/{bucket}/once") == b"first"
    assert client.listdir(f"/{bucket}") == ["once"]
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="once", Body=b"x", IfMatch='"0123"')
    assert error_code(e) == "PreconditionFailed"
    s3.put_object(Bucket=bucket, Key="once", Body=b"third", IfMatch=first)
    assert client.fetch(f"/{bucket}/once") == b"third"


def test_copy_object_on_the_servers(s3, client, bucket):
    s3.create_bucket(Bucket=f"{bucket}-to")
    data = os.urandom(6 * MIB + 3)
    tag = s3.put_object(Bucket=bucket, Key="src/obj", Body=data, ContentType="image/png",
                        Metadata={"a": "1"})["ETag"]
    done = s3.copy_object(Bucket=f"{bucket}-to", Key="dst/obj",
                          CopySource={"Bucket": bucket, "Key": "src/obj"})
    assert done["CopyObjectResult"]["ETag"] == tag
    got = s3.get_object(Bucket=f"{bucket}-to", Key="dst/obj")
    assert got["Body"].read() == data
    assert (got["ETag"], got["ContentType"], got["Metadata"]) == (tag, "image/png", {"a": "1"})
    assert client.listdir(f"/{bucket}-to/dst") == ["obj"]
    # REPLACE takes the request's headers and metadata.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource=f"{bucket}/src/obj",
                   MetadataDirective="REPLACE", ContentType="text/plain", Metadata={"b": "2"})
    got = s3.head_object(Bucket=bucket, Key="copy")
    assert (got["ETag"], got["ContentType"], got["Metadata"]) == (tag, "text/plain", {"b": "2"})
    # Onto itself only with REPLACE, which changes the metadata and keeps the bytes.
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="src/obj", CopySource=f"{bucket}/src/obj")
    assert error_code(e) == "InvalidRequest"
    s3.copy_object(Bucket=bucket, Key="src/obj", CopySource=f"{bucket}/src/obj",
                   MetadataDirective="REPLACE", Metadata={"c": "3"})
    got = s3.get_object(Bucket=bucket, Key="src/obj")
    assert (got["Body"].read(), got["ETag"], got["Metadata"]) == (data, tag, {"c": "3"})
    # The source's conditions; a missing source.
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource=f"{bucket}/src/obj",
                       CopySourceIfMatch='"other"')
    assert error_code(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="x", CopySource=f"{bucket}/missing")
    assert error_code(e) == "NoSuchKey"
    assert sorted(client.listdir(f"/{bucket}")) == ["copy", "src"]


def test_multipart_etags_metadata_and_retries(s3, client, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(100)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ContentType="video/mp4",
                                    Metadata={"k": "v"})["UploadId"]
    tags = [s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=d)["ETag"]
            for n, d in enumerate(parts, start=1)]
    assert tags == [quoted(md5(d)) for d in parts]
    # The same bytes again give the same ETag.
    again = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=2, Body=parts[1])
    assert again["ETag"] == tags[1]
    listing = {"Parts": [{"PartNumber": n, "ETag": t} for n, t in enumerate(tags, start=1)]}
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up,
                                        MultipartUpload=listing)
    whole = hashlib.md5(b"".join(hashlib.md5(d).digest() for d in parts)).hexdigest()
    assert done["ETag"] == quoted(f"{whole}-2")
    # A client's retry of the completion answers as the first did.
    retry = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up,
                                         MultipartUpload=listing)
    assert retry["ETag"] == done["ETag"]
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert got["Body"].read() == b"".join(parts)
    assert (got["ETag"], got["ContentType"], got["Metadata"]) == (done["ETag"], "video/mp4", {"k": "v"})
    # Parts but the last must be 5 MiB or more.
    up = s3.create_multipart_upload(Bucket=bucket, Key="small-parts")["UploadId"]
    tags = [s3.upload_part(Bucket=bucket, Key="small-parts", UploadId=up, PartNumber=n,
                           Body=b"p" * 1000)["ETag"] for n in (1, 2)]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="small-parts", UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": t}
                                       for n, t in enumerate(tags, start=1)]})
    assert error_code(e) == "EntityTooSmall"
    s3.abort_multipart_upload(Bucket=bucket, Key="small-parts", UploadId=up)


def test_versioning_is_never_enabled(s3, bucket):
    got = s3.get_bucket_versioning(Bucket=bucket)
    assert "Status" not in got
    with pytest.raises(ClientError) as e:
        s3.get_bucket_versioning(Bucket=f"{bucket}-missing")
    assert error_code(e) == "NoSuchBucket"


@pytest.fixture(scope="module")
def users(cluster, tmp_path_factory):
    """Clients of a gateway with two keys acting as users 1000 and 2000."""
    keys = ["AKIAUSERONE one-secret 1000:1000", "AKIAUSERTWO two-secret 2000:2000"]
    with gateway(cluster, tmp_path_factory.mktemp("s3-users"), keys) as url:
        yield (s3_client(url, "AKIAUSERONE", "one-secret"),
               s3_client(url, "AKIAUSERTWO", "two-secret"))


def test_a_bucket_belongs_to_its_key_and_is_private(users, client):
    one, two = users
    one.create_bucket(Bucket="t-users-private")
    st = client.stat("/t-users-private")
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1000, 1000, 0o700)
    one.put_object(Bucket="t-users-private", Key="a/secret", Body=b"mine")
    names = lambda s3: [b["Name"] for b in s3.list_buckets()["Buckets"]]  # noqa: E731
    assert "t-users-private" in names(one)
    assert "t-users-private" not in names(two)
    for attempt in [lambda: two.get_object(Bucket="t-users-private", Key="a/secret"),
                    lambda: two.put_object(Bucket="t-users-private", Key="b", Body=b"x"),
                    lambda: two.delete_bucket(Bucket="t-users-private")]:
        with pytest.raises(ClientError) as e:
            attempt()
        assert error_code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        two.create_bucket(Bucket="t-users-private")
    assert error_code(e) == "BucketAlreadyExists"
    with pytest.raises(ClientError) as e:
        one.create_bucket(Bucket="t-users-private")
    assert error_code(e) == "BucketAlreadyOwnedByYou"
    # public-read lets other keys list and read, not write.
    one.put_bucket_acl(Bucket="t-users-private", ACL="public-read")
    assert "t-users-private" in names(two)
    assert two.get_object(Bucket="t-users-private", Key="a/secret")["Body"].read() == b"mine"
    with pytest.raises(ClientError) as e:
        two.put_object(Bucket="t-users-private", Key="b", Body=b"x")
    assert error_code(e) == "AccessDenied"
    grants = one.get_bucket_acl(Bucket="t-users-private")["Grants"]
    assert {g["Permission"] for g in grants} == {"FULL_CONTROL", "READ"}
    one.delete_object(Bucket="t-users-private", Key="a/secret")
    one.delete_bucket(Bucket="t-users-private")
    assert "t-users-private" not in client.listdir("/")


def test_new_bucket_names_follow_s3s_rules(s3):
    for bad in ["foo-.bar", "foo.-bar", "ab", "Upper", "a..b", "-start", "192.168.5.4",
                "x" * 64, "name-s3alias"]:
        with pytest.raises(ClientError) as e:
            s3.create_bucket(Bucket=bad)
        assert error_code(e) == "InvalidBucketName", bad


def test_folder_keys_are_directories(s3, client, bucket):
    put = s3.put_object(Bucket=bucket, Key="photos/2026/", Body=b"")
    assert put["ETag"] == quoted(md5(b""))
    assert client.stat(f"/{bucket}/photos/2026").is_dir()
    head = s3.head_object(Bucket=bucket, Key="photos/2026/")
    assert (head["ContentLength"], head["ETag"]) == (0, quoted(md5(b"")))
    assert s3.get_object(Bucket=bucket, Key="photos/2026/")["Body"].read() == b""
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="photos/x/", Body=b"bytes")
    assert error_code(e) == "InvalidArgument"
    s3.put_object(Bucket=bucket, Key="photos/2026/a.jpg", Body=b"jpg")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="photos/", Delimiter="/")
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["photos/2026/"]
    # A folder holding keys stays; an empty one goes.
    s3.delete_object(Bucket=bucket, Key="photos/2026/")
    assert client.listdir(f"/{bucket}/photos/2026") == ["a.jpg"]
    s3.delete_object(Bucket=bucket, Key="photos/2026/a.jpg")
    s3.put_object(Bucket=bucket, Key="photos/empty/", Body=b"")
    s3.delete_object(Bucket=bucket, Key="photos/empty/")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="photos/empty/")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_versions_list_each_object_once_as_null(s3, bucket):
    for k in ["a", "b/c", "b/d"]:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    got = s3.list_object_versions(Bucket=bucket)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in got["Versions"]] == [
        ("a", "null", True), ("b/c", "null", True), ("b/d", "null", True)]
    page = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert page["IsTruncated"] and page["NextKeyMarker"] == "b/c"
    rest = s3.list_object_versions(Bucket=bucket, KeyMarker=page["NextKeyMarker"],
                                   VersionIdMarker=page["NextVersionIdMarker"])
    assert [v["Key"] for v in rest["Versions"]] == ["b/d"]


def test_limits_s3_sets(s3, endpoint, bucket):
    with pytest.raises(ClientError) as e:
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]})
    assert error_code(e) == "MalformedXML"
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    import urllib.error
    import urllib.request
    import boto3
    import botocore.config

    v4 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS,
                      aws_secret_access_key=SECRET, region_name="us-east-1",
                      config=botocore.config.Config(signature_version="s3v4",
                                                    s3={"addressing_style": "path"}))
    week = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"},
                                     ExpiresIn=7 * 24 * 3600)
    assert urllib.request.urlopen(week).read() == b"x"
    longer = week.replace("X-Amz-Expires=604800", "X-Amz-Expires=604801")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(longer)
    assert e.value.code == 400
    assert b"AuthorizationQueryParametersError" in e.value.read()


def test_a_streamed_upload_without_a_length(s3, bucket):
    """boto3 sends a body it cannot measure aws-chunked, with its checksum in a trailer."""
    import io

    class Unseekable(io.RawIOBase):
        def __init__(self, data):
            self.data = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            return self.data.readinto(b)

    data = os.urandom(3 * MIB + 1)
    s3.upload_fileobj(Unseekable(data), bucket, "streamed")
    assert s3.get_object(Bucket=bucket, Key="streamed")["Body"].read() == data


def test_the_gateway_serves_its_metrics(cluster, tmp_path):
    import socket
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with gateway(cluster, tmp_path, [f"{ACCESS} {SECRET}"],
                 ["--metrics", f"127.0.0.1:{port}"]) as url:
        s3 = s3_client(url)
        s3.create_bucket(Bucket="t-gateway-metrics")
        s3.put_object(Bucket="t-gateway-metrics", Key="k", Body=b"x" * 5000)
        assert s3.get_object(Bucket="t-gateway-metrics", Key="k")["Body"].read() == b"x" * 5000
        with pytest.raises(ClientError):
            s3.get_object(Bucket="t-gateway-metrics", Key="missing")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    req = "myriad_s3_requests_total"
    assert samples[(req, (("operation", "put_object"), ("status", "OK")))] == 1
    assert samples[(req, (("operation", "get_object"), ("status", "OK")))] == 1
    assert samples[(req, (("operation", "get_object"), ("status", "NoSuchKey")))] == 1
    count = "myriad_s3_request_duration_seconds_count"
    assert samples[(count, (("operation", "get_object"),))] == 2
    assert samples[("myriad_s3_body_bytes_total", (("direction", "in"),))] >= 5000
    assert samples[("myriad_s3_body_bytes_total", (("direction", "out"),))] >= 5000


def test_a_head_with_a_range_answers_for_the_range(s3, bucket):
    s3.put_object(Bucket=bucket, Key="r", Body=b"0123456789")
    head = s3.head_object(Bucket=bucket, Key="r", Range="bytes=2-5")
    assert (head["ContentLength"], head["ContentRange"]) == (4, "bytes 2-5/10")
    assert s3.head_object(Bucket=bucket, Key="r")["ContentLength"] == 10


def test_storage_classes_s3_does_not_know_are_refused(s3, bucket):
    s3.put_object(Bucket=bucket, Key="std", Body=b"x", StorageClass="STANDARD")
    s3.put_object(Bucket=bucket, Key="rr", Body=b"x", StorageClass="REDUCED_REDUNDANCY")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"x", StorageClass="NOT_A_CLASS")
    assert error_code(e) == "InvalidStorageClass"


def test_additional_checksums_are_checked_kept_and_given_back(s3, client, bucket):
    import zlib

    data = os.urandom(300_000)
    sha = base64.b64encode(hashlib.sha256(data).digest()).decode()
    put = s3.put_object(Bucket=bucket, Key="c", Body=data, ChecksumAlgorithm="SHA256")
    assert put["ChecksumSHA256"] == sha
    got = s3.get_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == sha and got["Body"].read() == data
    head = s3.head_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == sha and head["ChecksumType"] == "FULL_OBJECT"
    crc = base64.b64encode(zlib.crc32(b"payload").to_bytes(4, "big")).decode()
    s3.put_object(Bucket=bucket, Key="crc", Body=b"payload", ChecksumCRC32=crc)
    assert s3.head_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")["ChecksumCRC32"] == crc
    wrong = base64.b64encode(zlib.crc32(b"other").to_bytes(4, "big")).decode()
    for body in [b"payload", os.urandom(5 * MIB + 1)]:
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=bucket, Key="bad", Body=body, ChecksumCRC32=wrong)
        assert error_code(e) == "BadDigest"
    assert sorted(client.listdir(f"/{bucket}")) == ["c", "crc"]
    s3.copy_object(Bucket=bucket, Key="c2", CopySource=f"{bucket}/c")
    assert s3.head_object(Bucket=bucket, Key="c2", ChecksumMode="ENABLED")["ChecksumSHA256"] == sha
    client.remove(f"/{bucket}/c2")
    # Written through another client, the checksums are no longer given.
    client.write(f"/{bucket}/crc", b"changed")
    assert "ChecksumCRC32" not in s3.head_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")

