"""Compressed files, compressed tar shards and TFRecord read from an S3-compatible server (moto's
server mode, started on loopback by this module) equal the same files read locally: the
sequential `Blob` reader path of each format (decompression, the streamed TFRecord scan, ranged
reads of records); and WebDataset shards converted into the bucket by `write_shards` read back
through their member indexes (beside them, or built into a prefix of their own)."""

from __future__ import annotations

import bz2
import gzip
import io
import socket
import sys
import tarfile
import time

import pytest

import sluice
from procs import Child
from test_tfrecord import example, frame, record

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}

# moto logs every request on stderr, which nobody reads here: send it to /dev/null in the child.
SERVER = """
import os, sys
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 2)
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""


@pytest.fixture(scope="module")
def bucket():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Child(args=[sys.executable, "-c", SERVER, str(port)]) as child:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if child.proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip("moto server did not start")
                time.sleep(0.1)
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        )
        client.create_bucket(Bucket="formats")
        yield endpoint, client


@pytest.fixture
def s3(bucket, monkeypatch):
    endpoint, client = bucket
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    return client


def _put(client, tmp_path, key: str, data: bytes) -> str:
    """Puts `data` at `key` and writes the same bytes locally; returns the local path."""
    client.put_object(Bucket="formats", Key=key, Body=data)
    local = tmp_path / key.replace("/", "_")
    local.write_bytes(data)
    return str(local)


def _rows(ds):
    return [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in s.items()} for s in ds]


def test_compressed_text_and_tables_from_s3(s3, tmp_path):
    jsonl = "".join(f'{{"id": {i}, "t": "x{i}"}}\n' for i in range(200)).encode()
    csv = b"id,name\n" + b"".join(b'%d,"n, %d"\n' % (i, i) for i in range(200))
    local_jsonl = _put(s3, tmp_path, "t/x.jsonl.gz", gzip.compress(jsonl))
    local_csv = _put(s3, tmp_path, "tables/x.csv.bz2", bz2.compress(csv))
    _put(s3, tmp_path, "tables/y.csv", b"id,name\n900,plain\n")
    _put(s3, tmp_path, "tables/notes.txt.gz", gzip.compress(b"not a table\n"))
    remote = sluice.read_jsonl("s3://formats/t/x.jsonl.gz")
    assert _rows(remote.shuffle(seed=2)) == _rows(sluice.read_jsonl(local_jsonl).shuffle(seed=2))
    assert _rows(sluice.read_text("s3://formats/t/x.jsonl.gz"))[3] == {"text": '{"id": 3, "t": "x3"}'}
    # The prefix lists the compressed CSV with the plain one, not the compressed text file.
    tables = sluice.read_csv("s3://formats/tables/")
    assert _rows(tables)[:200] == _rows(sluice.read_csv(local_csv)) and _rows(tables)[200] == {"id": 900, "name": "plain"}


def test_compressed_tar_shards_from_s3(s3, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for k in range(4):
            info = tarfile.TarInfo(f"{k:03d}.txt")
            info.size = 2
            tf.addfile(info, io.BytesIO(b"hi"))
    _put(s3, tmp_path, "shards/shard-0.tar.gz", buf.getvalue())
    assert [r["__key__"] for r in sluice.read_webdataset("s3://formats/shards/")] == ["000", "001", "002", "003"]


def test_tfrecord_from_s3_plain_gzip_and_indexed(s3, tmp_path):
    frames = [frame(example(record(i))) for i in range(30)]
    data = b"".join(frames)
    local = _put(s3, tmp_path, "tfr/a.tfrecord", data)
    _put(s3, tmp_path, "tfr/b.tfrecord.gz", gzip.compress(data))
    offsets, at = [], 0
    for f in frames:
        offsets.append(f"{at} {len(f)}\n")
        at += len(f)
    _put(s3, tmp_path, "idx/a.index", "".join(offsets).encode())
    want = _rows(sluice.read_tfrecord(local).shuffle(seed=5))
    for ds in [
        sluice.read_tfrecord("s3://formats/tfr/a.tfrecord"),
        sluice.read_tfrecord("s3://formats/tfr/b.tfrecord.gz"),
        sluice.read_tfrecord("s3://formats/tfr/a.tfrecord", index="s3://formats/idx/a.index"),
    ]:
        assert len(ds) == 30 and _rows(ds.shuffle(seed=5)) == want
    assert len(sluice.read_tfrecord("s3://formats/tfr/")) == 60


def test_write_shards_to_s3_and_read_them_back_indexed(s3, tmp_path):
    # Convert once into the bucket, then a global shuffle over the shards through their indexes.
    src = sluice.range(30).map(lambda s: {"txt": f"sample {s['id']}", "cls": s["id"] % 3})
    files = src.write_shards("s3://formats/converted/", shard_size=3000)
    assert len(files) > 1 and files[0] == "s3://formats/converted/part-00000.tar"
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="formats", Prefix="converted/")["Contents"]}
    assert "converted/index.json" in keys and "converted/part-00000.tar.idx" in keys
    ds = sluice.read_webdataset("s3://formats/converted/", index=True)
    assert len(ds) == 30
    got = [bytes(s["txt"]).decode() for s in ds.shuffle(seed=1)]
    assert sorted(got) == sorted(f"sample {i}" for i in range(30)) and got != sorted(got)
    # Shards without indexes (a bucket one cannot write beside): indexes built once into a
    # prefix of their own, then loaded from there.
    for k in keys:
        if k.endswith(".idx"):
            s3.delete_object(Bucket="formats", Key=k)
    again = sluice.read_webdataset("s3://formats/converted/", index="s3://formats/wds-idx/")
    assert [bytes(s["txt"]) for s in again] == [bytes(s["txt"]) for s in ds]
    built = {o["Key"] for o in s3.list_objects_v2(Bucket="formats", Prefix="wds-idx/")["Contents"]}
    assert built == {f"wds-idx/part-{i:05d}.tar.idx" for i in range(len(files))}
