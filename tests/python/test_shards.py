"""Convert once, then read with random access (issue 38, items 3 and 4): `ds.write_shards`
writes WebDataset tar shards with member indexes (or Parquet) and `read_webdataset(index=...)`
reads any tar shards through such indexes — a true global shuffle, an exact `shard()`, an O(1)
resume — locally and from a real S3-compatible server on loopback."""

from __future__ import annotations

import json

import pytest

import sluice
from bucket_server import KEYS, object_gets, s3_server


def _raw(tmp_path, n=60):
    """n small 'images' (distinct bytes, the last 4 their number) in two class folders, the
    first half in c0: sorted paths are in number order."""
    root = tmp_path / "raw"
    for i in range(n):
        p = root / f"c{2 * i // n}" / f"{i:04d}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(bytes([i % 251]) * (200 + i) + i.to_bytes(4, "little"))
    return root


def _shards(tmp_path, n=60, shard_size=4096):
    out = tmp_path / "shards"
    files = (
        sluice.read_images(str(_raw(tmp_path, n)))
        .map(lambda s: {"jpg": s["bytes"], "cls": s["label"]})
        .write_shards(str(out), shard_size=shard_size)
    )
    return out, files


def _ids(samples):
    return [int.from_bytes(bytes(s["jpg"])[-4:], "little") for s in samples]


def test_written_shards_read_back_in_order_with_an_index(tmp_path):
    out, files = _shards(tmp_path)
    assert len(files) > 4 and all(f.endswith(".tar") for f in files)
    manifest = json.loads((out / "index.json").read_text())
    assert manifest["samples"] == 60 and len(manifest["shards"]) == len(files)
    ds = sluice.read_webdataset(str(out), index=True)
    assert len(ds) == 60
    got = list(ds)
    assert _ids(got) == list(range(60))
    assert [bytes(s["cls"]) for s in (got[0], got[-1])] == [b"0", b"1"]
    # The same samples, streamed without the index.
    streamed = list(sluice.read_webdataset(str(out)))
    assert [dict(s) for s in streamed] == [dict(s) for s in got]


def test_shuffle_is_a_global_permutation_shard_is_exact_and_resume_is_exact(tmp_path):
    out, files = _shards(tmp_path)
    ds = sluice.read_webdataset(str(out), index=True).shuffle(seed=3)
    e0 = _ids(ds.iter(epoch=0))
    assert sorted(e0) == list(range(60)) and e0 != list(range(60))
    # Global: the first 10 samples come from many shards, not one or two.
    per_shard = 60 / len(files)
    assert len({int(i // per_shard) for i in e0[:10]}) >= 4
    assert _ids(ds.iter(epoch=0)) == e0 and _ids(ds.iter(epoch=1)) != e0
    parts = [_ids(ds.shard(r, 3).iter(epoch=0)) for r in range(3)]
    assert sorted(sum(parts, [])) == list(range(60)) and all(len(p) == 20 for p in parts)
    # rank/world_size split by sample, as shard() does.
    ranked = sluice.read_webdataset(str(out), index=True, rank=1, world_size=3)
    assert _ids(ranked) == _ids(sluice.read_webdataset(str(out), index=True).shard(1, 3))
    # Resume after 3 batches: exactly the rest.
    batched = ds.batch(8)
    whole = [_ids_of_batch(b) for b in batched.iter(epoch=0)]
    it = batched.iter(epoch=0)
    for _ in range(3):
        next(it)
    state = it.state_dict()
    resumed = batched.iter(epoch=0)
    resumed.load_state_dict(state)
    assert [_ids_of_batch(b) for b in resumed] == whole[3:]


def _ids_of_batch(b):
    return [int.from_bytes(bytes(x)[-4:], "little") for x in b["jpg"]]


def test_an_index_directory_serves_shards_that_have_none(tmp_path):
    out, files = _shards(tmp_path)
    for f in files:
        (out / (f.rsplit("/", 1)[1] + ".idx")).unlink()
    idx = tmp_path / "idx"
    ds = sluice.read_webdataset(str(out), index=str(idx))
    assert len(ds) == 60 and _ids(ds.shuffle(seed=1))[:3] != [0, 1, 2]
    assert sorted(p.name for p in idx.iterdir()) == sorted(f.rsplit("/", 1)[1] + ".idx" for f in files)
    # index=True builds them in memory when missing: the same samples.
    assert _ids(sluice.read_webdataset(str(out), index=True)) == list(range(60))


def test_bad_arguments_are_clear_errors(tmp_path):
    out, _ = _shards(tmp_path, n=4)
    with pytest.raises(ValueError, match="shuffle_shards"):
        sluice.read_webdataset(str(out), index=True, shuffle_shards=True)
    with pytest.raises(TypeError, match="index"):
        sluice.read_webdataset(str(out), index=5)
    with pytest.raises(ValueError, match="shard_size"):
        sluice.range(3).write_shards(str(tmp_path / "x"), shard_size="lots")
    with pytest.raises(ValueError, match="format"):
        sluice.range(3).write_shards(str(tmp_path / "x"), format="tfrecord")
    with pytest.raises(ValueError, match="__key__"):
        sluice.range(3).map(lambda s: {"__key__": "same", "id": s["id"]}).write_shards(str(tmp_path / "y"))


def test_parquet_shards_keep_arrays(tmp_path):
    import numpy as np

    ds = sluice.range(50).map(lambda s: {"id": s["id"], "tokens": np.arange(s["id"] % 7 + 1, dtype=np.int32)})
    files = ds.write_shards(str(tmp_path / "pq"), format="parquet", shard_size=400)
    assert len(files) > 2 and all(f.endswith(".parquet") for f in files)
    back = list(sluice.read_parquet(str(tmp_path / "pq")))
    assert [s["id"] for s in back] == list(range(50))
    assert list(back[13]["tokens"]) == list(range(13 % 7 + 1))


@pytest.fixture
def _keys(monkeypatch):
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)


def test_shards_in_a_bucket_written_and_read_by_ranged_gets(tmp_path, _keys):
    root = tmp_path / "bucket"
    root.mkdir()
    log = tmp_path / "log.jsonl"
    with s3_server(root, "--log", log) as endpoint:
        sluice.configure_storage("s3://bkt", endpoint=endpoint, allow_http=True)
        src = sluice.read_files(str(_raw(tmp_path, 40))).map(lambda s: {"jpg": s["bytes"]})
        files = src.write_shards("s3://bkt/shards/", shard_size=3000)
        assert files[0] == "s3://bkt/shards/part-00000.tar"
        assert (root / "shards" / "index.json").exists()
        assert (root / "shards" / "part-00000.tar.idx").exists()
        # Without the object cache: one ranged GET per sample's members, never the whole shard.
        ds = sluice.read_webdataset("s3://bkt/shards/", index=True, cache_dir=False)
        assert sorted(_ids(ds.shuffle(seed=2))) == list(range(40))
        gets = [g for g in object_gets(log) if g["key"].endswith(".tar")]
        assert gets and all(g.get("range") for g in gets)


def test_a_shorter_rewrite_in_a_bucket_leaves_none_of_the_longer_run_behind(tmp_path, _keys):
    """Rewritten with fewer shards (or part files), a bucket prefix kept the earlier run's
    extra ones — a folder deletes them, a prefix did not — and reading the prefix gave the new
    samples followed by 32 old ones, without a word. Now the stale objects are deleted, and the
    earlier manifest before any shard is written, as in a folder."""
    root = tmp_path / "bucket"
    root.mkdir()
    with s3_server(root) as endpoint:
        sluice.configure_storage("s3://bkt", endpoint=endpoint, allow_http=True)
        old = sluice.from_items([{"__key__": f"old{i:03d}", "txt": "o" * 1000} for i in range(40)])
        new = sluice.from_items([{"__key__": f"new{i:03d}", "txt": "n" * 1000} for i in range(8)])
        assert len(old.write_shards("s3://bkt/shards/", shard_size=5000)) == 10
        assert len(new.write_shards("s3://bkt/shards/", shard_size=5000)) == 2
        assert sorted(p.name for p in (root / "shards").iterdir()) == [
            "index.json", "part-00000.tar", "part-00000.tar.idx", "part-00001.tar", "part-00001.tar.idx"]
        want = [f"new{i:03d}" for i in range(8)]
        assert [s["__key__"] for s in sluice.read_webdataset("s3://bkt/shards/", cache_dir=False)] == want
        assert [s["__key__"] for s in sluice.read_webdataset("s3://bkt/shards/", index=True, cache_dir=False)] == want
        assert json.loads((root / "shards" / "index.json").read_text())["samples"] == 8
        # The part files of write_parquet and write_jsonl alike.
        rows = lambda tag, n: sluice.from_items([{"k": f"{tag}{i}"} for i in range(n)])  # noqa: E731
        for write, read, ext in (("write_parquet", sluice.read_parquet, "parquet"), ("write_jsonl", sluice.read_jsonl, "jsonl")):
            assert len(getattr(rows("old", 30), write)(f"s3://bkt/{ext}/", rows_per_file=10)) == 3
            assert len(getattr(rows("new", 5), write)(f"s3://bkt/{ext}/", rows_per_file=10)) == 1
            assert [p.name for p in (root / ext).iterdir()] == [f"part-00000.{ext}"]
            assert [s["k"] for s in read(f"s3://bkt/{ext}/", cache_dir=False)] == [f"new{i}" for i in range(5)]


def test_a_folder_with_a_manifest_is_read_as_the_shards_it_names(tmp_path):
    """`index.json` is the converted dataset's definition, not a listing of its folder: a
    folder that holds a stray shard beside the ones it names reads the named ones, in its order,
    and a named shard written again with another sample count is refused, by the indexed
    WebDataset reader and by read_parquet."""
    out, files = _shards(tmp_path)
    named = json.loads((out / "index.json").read_text())["shards"]
    (out / "part-00099.tar").write_bytes((out / "part-00000.tar").read_bytes())
    assert _ids(sluice.read_webdataset(str(out))) == list(range(60))
    assert _ids(sluice.read_webdataset(str(out), index=True)) == list(range(60))
    # Another conversion's shard of 5 samples under a name the manifest gives 2 or 3.
    other = sluice.from_items([{"__key__": f"x{i}", "jpg": b"x"} for i in range(5)])
    other.write_shards(str(tmp_path / "other"), shard_size="1MB")
    (out / named[1]["file"]).write_bytes((tmp_path / "other" / "part-00000.tar").read_bytes())
    (out / (named[1]["file"] + ".idx")).unlink()
    assert named[1]["samples"] != 5
    with pytest.raises(sluice.SluiceError, match=r"part-00001\.tar: 5 samples where its index\.json says"):
        sluice.read_webdataset(str(out), index=True)
    pq_out = tmp_path / "pq"
    sluice.from_items([{"k": i} for i in range(30)]).write_shards(str(pq_out), format="parquet", shard_size=100)
    pq_named = json.loads((pq_out / "index.json").read_text())["shards"]
    assert len(pq_named) > 1 and pq_named[0]["samples"] != 7
    assert [s["k"] for s in sluice.read_parquet(str(pq_out))] == list(range(30))
    sluice.from_items([{"k": i} for i in range(7)]).write_shards(str(tmp_path / "pq7"), format="parquet")
    (pq_out / pq_named[0]["file"]).write_bytes((tmp_path / "pq7" / "part-00000.parquet").read_bytes())
    with pytest.raises(sluice.SluiceError, match=r"part-00000\.parquet: 7 samples where its index\.json says"):
        sluice.read_parquet(str(pq_out))


def test_an_unfinished_conversion_is_refused_not_read_in_part(tmp_path, _keys):
    """A conversion writes a manifest saying it is writing before its first shard, and the
    one naming its shards last. A folder whose conversion died (or is still running) held a
    mix of the new run's shards and the old run's, and reading it gave them all without a
    word; now it is refused, whichever reader opens it, until a conversion finishes. A
    folder of write_shards tar shards with no manifest at all (their .idx files say what
    wrote them) is refused too. Named by a glob, the shards are read as they are."""

    def dies_at(k):
        def f(s):
            if s["k"] == k:
                raise RuntimeError("the conversion dies here")
            return s
        return f

    rows = sluice.from_items([{"__key__": f"k{i:03d}", "k": i, "txt": "t" * 500} for i in range(40)])
    for fmt, read, glob in (("webdataset", sluice.read_webdataset, "part-*.tar"),
                            ("parquet", sluice.read_parquet, "part-*.parquet")):
        out = tmp_path / fmt
        rows.write_shards(str(out), format=fmt, shard_size=4000)
        assert json.loads((out / "index.json").read_text())["complete"] is True
        assert [int(s["k"]) for s in read(str(out))] == list(range(40))
        with pytest.raises(Exception, match="the conversion dies here"):
            rows.map(dies_at(30)).write_shards(str(out), format=fmt, shard_size=4000)
        assert json.loads((out / "index.json").read_text())["complete"] is False
        with pytest.raises(sluice.SluiceError, match="conversion into it has not finished"):
            read(str(out))
        assert len(list(read(str(out / glob)))) >= 30  # the shards as they are, both runs'
    with pytest.raises(sluice.SluiceError, match="has not finished"):
        sluice.read_webdataset(str(tmp_path / "webdataset"), index=True)
    # A folder of an earlier version's conversion that died: shards and indexes, no manifest.
    out, files = _shards(tmp_path)
    (out / "index.json").unlink()
    for index in (False, True):
        with pytest.raises(sluice.SluiceError, match="without their index.json: a conversion that did not finish"):
            sluice.read_webdataset(str(out), index=index)
    assert _ids(sluice.read_webdataset(str(out / "part-*.tar"))) == list(range(60))
    root = tmp_path / "bucket"
    (root / "shards").mkdir(parents=True)
    with s3_server(root) as endpoint:
        sluice.configure_storage("s3://bkt", endpoint=endpoint, allow_http=True)
        rows.write_shards("s3://bkt/shards/", shard_size=4000)
        assert [int(s["k"]) for s in sluice.read_webdataset("s3://bkt/shards/", cache_dir=False)] == list(range(40))
        with pytest.raises(Exception, match="the conversion dies here"):
            rows.map(dies_at(30)).write_shards("s3://bkt/shards/", shard_size=4000)
        for prefix in ("s3://bkt/shards/", "s3://bkt/shards"):
            with pytest.raises(sluice.SluiceError, match="has not finished"):
                sluice.read_webdataset(prefix, cache_dir=False)
