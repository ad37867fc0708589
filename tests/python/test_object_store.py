"""Object storage for real: readers and sinks against an S3-compatible server (moto's server
mode) started on loopback by this module. Nothing mocks S3 inside the process: sluice talks
HTTP to the server through the `object_store` crate, with credentials from the environment.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import tarfile
import time

import pytest

import sluice

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto(extra_env: dict[str, str] | None = None):
    port = _free_port()
    env = {**os.environ, **KEYS, **(extra_env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                pytest.skip("moto server failed to start")
            time.sleep(0.1)
    proc.kill()
    pytest.skip("moto server did not start in 30 s")


@pytest.fixture(scope="module")
def s3():
    proc, endpoint = _start_moto()
    client = boto3.client("s3", endpoint_url=endpoint, **{k.lower(): v for k, v in KEYS.items() if k != "AWS_REGION"}, region_name="us-east-1")
    yield endpoint, client
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def env(s3, monkeypatch):
    endpoint, client = s3
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    return client


def _bucket(client, name):
    client.create_bucket(Bucket=name)
    return name


def test_parquet_from_s3_with_glob_projection_and_shuffle(env, tmp_path):
    b = _bucket(env, "pq-bucket")
    for i in range(3):
        buf = io.BytesIO()
        pq.write_table(pa.table({"id": list(range(i * 10, i * 10 + 10)), "t": ["x"] * 10}), buf, row_group_size=4)
        env.put_object(Bucket=b, Key=f"corpus/part-{i}.parquet", Body=buf.getvalue())
    env.put_object(Bucket=b, Key="corpus/README.txt", Body=b"not parquet")
    ds = sluice.read_parquet(f"s3://{b}/corpus/*.parquet", columns=["id"])
    assert [s["id"] for s in ds] == list(range(30))
    assert sorted(s["id"] for s in ds.shuffle(seed=0)) == list(range(30))
    assert len(list(sluice.read_parquet(f"s3://{b}/corpus/"))) == 30  # prefix listing, .parquet only


def test_csv_jsonl_sink_and_webdataset_on_s3(env, tmp_path):
    b = _bucket(env, "misc-bucket")
    env.put_object(Bucket=b, Key="t.csv", Body=b'a,b\n1,"x,y"\n2,z\n')
    assert sluice.read_csv(f"s3://{b}/t.csv").take(2)[0] == {"a": 1, "b": "x,y"}

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for k in range(3):
            info = tarfile.TarInfo(f"{k}.txt")
            info.size = 2
            tf.addfile(info, io.BytesIO(b"hi"))
    env.put_object(Bucket=b, Key="shards/shard-0.tar", Body=buf.getvalue())
    assert [r["__key__"] for r in sluice.read_webdataset(f"s3://{b}/shards/*.tar")] == ["0", "1", "2"]

    files = sluice.range(10).write_parquet(f"s3://{b}/out", rows_per_file=6)
    assert files == [f"s3://{b}/out/part-00000.parquet", f"s3://{b}/out/part-00001.parquet"]
    assert [s["id"] for s in sluice.read_parquet(f"s3://{b}/out/")] == list(range(10))
    sluice.range(3).write_jsonl(f"s3://{b}/j")
    body = env.get_object(Bucket=b, Key="j/part-00000.jsonl")["Body"].read()
    assert body == b'{"id":0}\n{"id":1}\n{"id":2}\n'


def test_missing_object_and_missing_credentials(env, monkeypatch, tmp_path):
    b = _bucket(env, "empty-bucket")
    with pytest.raises(FileNotFoundError, match="nothing.parquet"):
        sluice.read_parquet(f"s3://{b}/nothing.parquet")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with pytest.raises(ValueError, match="Missing AccessKeyId"):  # half a key pair
        sluice.read_parquet("s3://half-configured-bucket/x.parquet")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws profile
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9")  # no instance metadata
    with pytest.raises(OSError, match="AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY not set.*instance metadata"):
        sluice.read_parquet("s3://never-configured-bucket/x.parquet")


def test_invalid_credentials_are_a_clear_error(monkeypatch):
    # A second server that checks credentials: moto authenticates every request once
    # INITIAL_NO_AUTH_ACTION_COUNT requests have been served unauthenticated.
    proc, endpoint = _start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    try:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
        with pytest.raises(OSError, match="access denied.*AWS_ACCESS_KEY_ID"):
            sluice.read_parquet("s3://auth-bucket/x.parquet")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_jsonl_and_text_from_s3(env, sluice_log):
    b = _bucket(env, "lines-bucket")
    env.put_object(Bucket=b, Key="data/a.jsonl", Body=b'{"id": 1, "t": "x"}\nbroken\n{"id": "2"}\n')
    env.put_object(Bucket=b, Key="data/b.jsonl", Body=b'{"id": 3}\n')
    env.put_object(Bucket=b, Key="text/a.txt", Body="one\n\ntwo\r\nthr\u00e9e".encode())
    with sluice_log("skipped 1"):
        ds = sluice.read_jsonl(f"s3://{b}/data/*.jsonl", schema={"id": "int"}, on_error="skip")
    assert [s["id"] for s in ds] == [1, 2, 3]
    assert sorted(s["id"] for s in ds.shuffle(seed=1)) == [1, 2, 3]
    assert [s["text"] for s in sluice.read_text(f"s3://{b}/text/")] == ["one", "two", "thr\u00e9e"]
    with pytest.raises(sluice.PipelineError, match=r"s3://lines-bucket/data/a.jsonl:2: invalid JSON"):
        list(sluice.read_jsonl(f"s3://{b}/data/a.jsonl"))


def test_gs_urls_without_credentials_name_every_lookup(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith("GOOGLE_") or k == "SERVICE_ACCOUNT":
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud application default credentials
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server answers
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    lookups = "GOOGLE_APPLICATION_CREDENTIALS.*not set.*application_default_credentials.json not found.*metadata server"
    for i, read in enumerate((sluice.read_parquet, sluice.read_jsonl, sluice.read_text, sluice.read_webdataset)):
        with pytest.raises(OSError, match=lookups):
            list(read(f"gs://some-bucket-{i}/data/part-0.parquet"))  # tar shards open when read
    with pytest.raises(OSError, match=lookups):
        sluice.range(3).write_jsonl("gs://some-bucket-9/out")


def test_read_images_from_a_bucket_equals_local(env, tmp_path):
    """The most common CV layout in a bucket: class folders of images under a prefix. Listed
    concurrently, labelled by parent folder, fetched ahead of need; every batch equals the
    local run's, with shuffle, shard and a resumed checkpoint."""
    Image = pytest.importorskip("PIL.Image")
    import sluice.image as img

    b = _bucket(env, "images-bucket")
    for c, cls in enumerate(["bird", "cat", "dog"]):
        (tmp_path / "train" / cls).mkdir(parents=True)
        for i in range(7):
            buf = io.BytesIO()
            Image.new("RGB", (40 + i, 30 + c), (30 * i, 80 * c, 120)).save(buf, "JPEG" if i % 2 else "PNG")
            name = f"{i}.{'jpg' if i % 2 else 'png'}"
            (tmp_path / "train" / cls / name).write_bytes(buf.getvalue())
            env.put_object(Bucket=b, Key=f"train/{cls}/{name}", Body=buf.getvalue())
    env.put_object(Bucket=b, Key="train/cat/notes.txt", Body=b"not an image")

    def pipeline(root):
        return (sluice.read_images(root, labels="parent_dir")
                .shuffle(seed=3)
                .shard(1, 2)
                .map(img.decode())
                .map(img.random_resized_crop(16))
                .batch(4))

    local = list(pipeline(str(tmp_path / "train")))
    for root in (f"s3://{b}/train/", f"s3://{b}/train"):  # a prefix with or without its slash
        ds = sluice.read_images(root, labels="parent_dir")
        assert ds.class_names == ["bird", "cat", "dog"] and len(ds) == 21
        remote = list(pipeline(root))
        assert len(remote) == len(local) == 3
        for x, y in zip(local, remote):
            assert (x["image"] == y["image"]).all() and (x["label"] == y["label"]).all()
    it = pipeline(f"s3://{b}/train/").iter(seed=5)
    next(it)
    state = it.state_dict()
    rest = [x["label"].tolist() for x in it]
    resumed = pipeline(f"s3://{b}/train/").iter(seed=5)
    resumed.load_state_dict(state)
    assert [x["label"].tolist() for x in resumed] == rest
    files = sluice.read_files(f"s3://{b}/train/cat/")
    assert len(files) == 8 and files.take(8)[7]["bytes"] == b"not an image"
    with pytest.raises(FileNotFoundError, match="matched no objects"):
        sluice.read_images(f"s3://{b}/nothing-here/")


def test_parquet_fetched_ahead_across_epochs_equals_local(env, tmp_path):
    """Row groups are fetched ahead of a scan, across file and epoch ends: every row arrives,
    in the local run's order."""
    b = _bucket(env, "ahead-bucket")
    for i in range(3):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"id": list(range(i * 50, i * 50 + 50))}), path, row_group_size=7)
        env.put_object(Bucket=b, Key=f"p/part-{i}.parquet", Body=path.read_bytes())
    local = [s["id"] for s in sluice.read_parquet(str(tmp_path)).shuffle(seed=2).repeat(3)]
    remote = [s["id"] for s in sluice.read_parquet(f"s3://{b}/p/").shuffle(seed=2).repeat(3)]
    assert remote == local and sorted(remote) == sorted(list(range(150)) * 3)
    batches = [x["id"].tolist() for x in sluice.read_parquet(f"s3://{b}/p/").repeat(2).batch(16)]
    assert sum(batches, []) == list(range(150)) * 2


def test_azure_urls_name_their_lookups(monkeypatch):
    for k in list(os.environ):
        if k.startswith("AZURE_"):
            monkeypatch.delenv(k)
    with pytest.raises(ValueError, match="account"):
        sluice.read_parquet("az://container/x.parquet")
    # An emulator endpoint nothing listens on: the error names what was looked up.
    sluice.configure_storage("az://box", account_name="devstoreaccount1", use_emulator="true",
                             endpoint="http://127.0.0.1:9")
    with pytest.raises(OSError, match="AZURE_STORAGE_ACCOUNT_KEY.*not set"):
        sluice.read_parquet("az://box/x.parquet")
    with pytest.raises(ValueError, match="unknown option 'colour'"):
        sluice.configure_storage("az://box", colour="red")


def test_text_and_csv_read_from_the_copy_made_while_indexing(env):
    """Opening a text, JSONL or CSV object reads it once to index its records, keeping a local
    copy; records then come from that copy (one request per record would cost a bucket's
    latency each): the object can even be deleted afterwards."""
    b = _bucket(env, "copy-bucket")
    env.put_object(Bucket=b, Key="t.txt", Body=b"".join(b"line %d\n" % i for i in range(500)))
    env.put_object(Bucket=b, Key="t.csv", Body=b"a,b\n" + b"".join(b"%d,x%d\n" % (i, i) for i in range(300)))
    text = sluice.read_text(f"s3://{b}/t.txt")
    table = sluice.read_csv(f"s3://{b}/t.csv")
    env.delete_object(Bucket=b, Key="t.txt")
    env.delete_object(Bucket=b, Key="t.csv")
    assert sorted(s["text"] for s in text.shuffle(seed=1)) == sorted(f"line {i}" for i in range(500))
    assert [s["a"] for s in table] == list(range(300))
    with pytest.raises(FileNotFoundError):
        sluice.read_text(f"s3://{b}/t.txt")  # a new dataset opens the object again
