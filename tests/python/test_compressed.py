"""Compressed text, JSON lines, CSV and tar shards by extension (.gz, .zst, .bz2), written by
Python's gzip/bz2/tarfile and the zstd CLI, read back equal to the plain files."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import shutil
import tarfile

import pytest

import sluice
from procs import run_cmd


def _zstd(data: bytes, tmp_path) -> bytes:
    try:
        import zstandard
    except ImportError:
        zstandard = None
    if zstandard is not None:
        return zstandard.ZstdCompressor().compress(data)
    if shutil.which("zstd") is None:
        pytest.skip("neither the zstandard package nor the zstd CLI is available")
    src = tmp_path / "zstd-input"
    src.write_bytes(data)
    r = run_cmd(["zstd", "-q", "-f", "-o", tmp_path / "zstd-output", src], timeout=60)
    assert r.returncode == 0, r.stderr
    return (tmp_path / "zstd-output").read_bytes()


CODECS = {
    "gz": lambda data, _: gzip.compress(data),
    "bz2": lambda data, _: bz2.compress(data),
    "zst": _zstd,
}

TEXT = "".join(f"line {i} é\n" + ("\n" if i % 7 == 0 else "") for i in range(300))
JSONL = "".join(json.dumps({"id": i, "name": f"n{i}", "v": [i, i + 1]}) + "\n" for i in range(300))
CSV = "id,name\n" + "".join(f'{i},"a, {i}\nmore"\n' for i in range(300))


def _rows(ds):
    return [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in s.items()} for s in ds]


@pytest.mark.parametrize("ext", sorted(CODECS))
def test_text_jsonl_csv_read_back_equal_to_the_plain_files(tmp_path, ext):
    for name, body, reader in [
        ("x.txt", TEXT, sluice.read_text),
        ("x.jsonl", JSONL, sluice.read_jsonl),
        ("x.csv", CSV, sluice.read_csv),
    ]:
        plain = tmp_path / name
        plain.write_text(body)
        packed = tmp_path / f"{name}.{ext}"
        packed.write_bytes(CODECS[ext](body.encode(), tmp_path))
        want, got = reader(plain), reader(packed)
        assert len(got) == len(want) == 300
        assert _rows(got) == _rows(want)
        # Random access: the same global shuffle and the same shards as the plain file.
        assert _rows(got.shuffle(seed=3)) == _rows(want.shuffle(seed=3))
        assert _rows(got.shard(1, 3)) == _rows(want.shard(1, 3))


def test_resume_mid_epoch_of_a_compressed_file(tmp_path):
    p = tmp_path / "x.jsonl.gz"
    p.write_bytes(gzip.compress(JSONL.encode()))
    ds = sluice.read_jsonl(p).shuffle(seed=1).batch(8)
    it = ds.iter(seed=2)
    head = [next(it)["id"].tolist() for _ in range(5)]
    state = it.state_dict()
    rest = [b["id"].tolist() for b in it]
    again = ds.iter(seed=2, num_threads=1)
    again.load_state_dict(state)
    assert [b["id"].tolist() for b in again] == rest
    assert sorted(sum(head + rest, [])) == list(range(300))


def test_directories_list_compressed_files_with_the_plain_ones(tmp_path):
    (tmp_path / "a.csv").write_text("id\n1\n2\n")
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(b"id\n3\n"))
    (tmp_path / "c.tsv.bz2").write_bytes(bz2.compress(b"id\n4\n"))
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"not a table\n"))
    assert [s["id"] for s in sluice.read_csv(tmp_path)] == [1, 2, 3, 4]


def _tar(members, mode="w"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_compressed_tar_shards_read_like_plain_ones(tmp_path):
    members = [m for k in range(5) for m in [(f"{k:03d}.txt", b"T%d" % k), (f"{k:03d}.cls", b"%d" % k)]]
    plain = _tar(members)
    (tmp_path / "shard-0.tar").write_bytes(plain)
    (tmp_path / "shard-1.tar.gz").write_bytes(_tar(members, "w:gz"))
    (tmp_path / "shard-2.tgz").write_bytes(gzip.compress(plain))
    (tmp_path / "shard-3.tar.bz2").write_bytes(_tar(members, "w:bz2"))
    (tmp_path / "shard-4.tar.zst").write_bytes(_zstd(plain, tmp_path))
    rows = list(sluice.read_webdataset(str(tmp_path)))
    assert [r["__url__"].rsplit("/", 1)[1] for r in rows[::5]] == [
        "shard-0.tar",
        "shard-1.tar.gz",
        "shard-2.tgz",
        "shard-3.tar.bz2",
        "shard-4.tar.zst",
    ]
    strip = [{k: v for k, v in r.items() if k != "__url__"} for r in rows]
    assert all(strip[i] == strip[i % 5] for i in range(25))
    assert strip[3] == {"__key__": "003", "txt": b"T3", "cls": b"3"}


def test_truncated_or_corrupt_files_name_the_file_and_codec(tmp_path):
    body = "".join(f"{i},{i * 7}\n" for i in range(50_000)).encode()
    cases = {
        "cut.txt.gz": gzip.compress(body)[:-100],
        "cut.csv.bz2": bz2.compress(body)[:5000],
        "bad.jsonl.gz": gzip.compress(body)[:40] + b"\x00" * 200 + gzip.compress(body)[240:],
    }
    readers = {"txt": sluice.read_text, "csv": sluice.read_csv, "jsonl": sluice.read_jsonl}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        codec = "gzip" if name.endswith(".gz") else "bzip2"
        with pytest.raises(sluice.SluiceError, match=rf"{name}: corrupt or truncated {codec} data"):
            readers[name.split(".")[1]](tmp_path / name)
    (tmp_path / "cut.tar.gz").write_bytes(_tar([("a.txt", b"x" * 100_000)], "w:gz")[:-200])
    with pytest.raises(sluice.SluiceError, match=r"cut.tar.gz: .*corrupt or truncated gzip data"):
        list(sluice.read_webdataset(tmp_path / "cut.tar.gz"))
