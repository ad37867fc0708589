"""Every public API name of the foundation, with real behaviour."""

import json
import threading

import numpy as np
import pytest

import sluice


def ids(batches, field="id"):
    return [int(x) for b in batches for x in np.atleast_1d(b[field])]


def test_range_and_iteration():
    assert [s["id"] for s in sluice.range(5)] == [0, 1, 2, 3, 4]
    assert sluice.range(0).take(3) == []


def test_from_items_keeps_types():
    items = [{"a": 1, "b": "x", "c": b"\x00", "d": np.arange(3, dtype=np.int16), "e": None, "f": [1, 2]}]
    out = sluice.from_items(items).take(1)[0]
    assert out["a"] == 1 and out["b"] == "x" and out["c"] == b"\x00" and out["e"] is None
    assert out["d"].dtype == np.int16 and out["d"].tolist() == [0, 1, 2]
    assert out["f"] == [1, 2]
    assert sluice.from_items([1, 2]).take(2) == [{"item": 1}, {"item": 2}]


def test_map_filter_flat_map():
    ds = (
        sluice.range(10)
        .map(lambda s: {"id": s["id"], "sq": s["id"] ** 2})
        .filter(lambda s: s["id"] % 2 == 0)
        .flat_map(lambda s: [s, {"id": -s["id"], "sq": 0}])
    )
    out = list(ds)
    assert [s["id"] for s in out] == [0, 0, 2, -2, 4, -4, 6, -6, 8, -8]


def test_batch_stacks_and_lists():
    ds = sluice.range(5).map(lambda s: {"x": np.full((2, 3), s["id"], np.float32), "name": f"n{s['id']}", "id": s["id"]})
    batches = list(ds.batch(2))
    assert len(batches) == 3
    assert batches[0]["x"].shape == (2, 2, 3) and batches[0]["x"].dtype == np.float32
    assert batches[0]["name"] == ["n0", "n1"]
    assert batches[0]["id"].dtype == np.int64
    assert len(list(ds.batch(2, drop_last=True))) == 2


def test_batch_hand_off_is_zero_copy():
    b = sluice.range(8).map(lambda s: {"x": np.ones(1000, np.float32)}).batch(8).take(1)[0]
    x = b["x"]
    # numpy does not own the memory: the Rust buffer was handed over, not copied.
    assert not x.flags["OWNDATA"] and x.base is not None
    x[0, 0] = 5  # writable


def test_map_batches_continues_as_samples():
    def double(batch):
        return {"id": batch["id"] * 2}

    out = list(sluice.range(7).map_batches(double, batch_size=3))
    assert [s["id"] for s in out] == [0, 2, 4, 6, 8, 10, 12]


def test_repeat_prefetch_limit_take():
    ds = sluice.range(3).repeat(2).prefetch(4)
    assert [s["id"] for s in ds] == [0, 1, 2, 0, 1, 2]
    assert [s["id"] for s in sluice.range(3).repeat().limit(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert len(sluice.range(100).take(5)) == 5


def test_shuffle_shard_are_deterministic():
    a = [s["id"] for s in sluice.range(50).shuffle(seed=3)]
    assert sorted(a) == list(range(50)) and a != list(range(50))
    assert a == [s["id"] for s in sluice.range(50).shuffle(seed=3)]
    shards = [[s["id"] for s in sluice.range(10).shuffle(1).shard(r, 3)] for r in range(3)]
    assert all(len(s) == 3 for s in shards)
    assert len(set(sum(shards, []))) == 9


def test_shuffle_buffer_is_seeded_permutation():
    a = [s["id"] for s in sluice.range(100).filter(lambda s: True).shuffle_buffer(10, seed=1)]
    assert sorted(a) == list(range(100)) and a != list(range(100))
    assert a == [s["id"] for s in sluice.range(100).filter(lambda s: True).shuffle_buffer(10, seed=1)]


def test_udf_rng_is_reproducible_and_per_sample():
    def aug(s, rng):
        return {"id": s["id"], "r": float(rng.random())}

    def run(seed, threads):
        return [s["r"] for s in sluice.range(20).map(aug).iter(seed=seed, num_threads=threads)]

    a = run(0, 1)
    assert a == run(0, 2) == run(0, 8)
    assert a != run(1, 1)
    assert len(set(a)) == 20


def test_read_files_and_images(images_dir):
    files = sluice.read_files(str(images_dir / "*" / "*.jpg")).take(100)
    assert len(files) == 8 and files[0]["bytes"][:2] == b"\xff\xd8"
    imgs = list(sluice.read_images(str(images_dir)))
    assert sorted({s["label"] for s in imgs}) == [0, 1, 2]
    by_class = {s["path"].split("/")[-2]: s["label"] for s in imgs}
    assert by_class == {"everyday": 0, "space": 1, "texture": 2}
    assert "label" not in sluice.read_images(str(images_dir), labels=None).take(1)[0]


def test_read_text_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n\nworld\n")
    assert [s["text"] for s in sluice.read_text(str(tmp_path / "a.txt"))] == ["hello", "world"]
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"i": i, "v": [i, i]}) for i in range(4)))
    rows = list(sluice.read_jsonl(str(tmp_path / "b.jsonl")))
    assert [r["i"] for r in rows] == [0, 1, 2, 3] and rows[1]["v"].tolist() == [1, 1]
    assert len(list(sluice.read_jsonl(str(tmp_path / "b.jsonl")).shuffle(seed=2))) == 4


def test_builtin_ops():
    out = sluice.from_items([{"a": 1, "b": 2}]).map(sluice.ops.select(["b"])).take(1)
    assert out == [{"b": 2}]
    out = sluice.from_items([{"a": 1, "b": 2}]).map(sluice.ops.drop(["a"])).map(sluice.ops.noop()).take(1)
    assert out == [{"b": 2}]


def test_stats_report():
    ds = sluice.range(1000).map(sluice.ops.noop()).batch(100)
    for _ in ds.iter(num_threads=2):
        pass
    st = ds.stats()
    assert st.consumer["outputs"] == 10 and st.consumer["samples"] == 1000
    assert st.consumer["delay_max_ms"] >= st.consumer["delay_p95_ms"] >= st.consumer["delay_p50_ms"]
    names = [s["name"] for s in st.stages]
    assert names[0].startswith("source") and "batch(100)" in names
    assert st.stages[-1]["samples_out"] == 10
    assert "batch delay" in str(st)


def test_explain_shows_both_plans():
    text = sluice.range(4).map(sluice.ops.noop()).batch(2).explain()
    assert "logical plan" in text and "read+noop" in text and "batch(2)" in text


def test_order_is_independent_of_threads():
    def slow_odd(s):
        if s["id"] % 3 == 0:
            sum(range(2000))
        return {"id": s["id"]}

    ds = sluice.range(300).map(slow_odd).filter(lambda s: s["id"] % 7 != 0).batch(16)
    ref = ids(ds.iter(num_threads=1))
    for t in (0, 2, 8):
        assert ids(ds.iter(num_threads=t)) == ref


def test_num_threads_zero_runs_stages_in_the_consumer():
    # Every stage runs in the iterating thread (as DataLoader(num_workers=0)): the Python
    # function sees that thread, outputs are the same, the plan says inline (the source of
    # indices too: it makes a chunk when the consumer asks for one).
    seen = set()

    def where(s):
        seen.add(threading.get_ident())
        return {"id": s["id"] * 2}

    ds = sluice.range(100).map(where).map(sluice.ops.noop()).batch(8)
    out = [b["id"].tolist() for b in ds.iter(num_threads=0)]
    assert seen == {threading.get_ident()}
    lines = str(ds.stats()).splitlines()
    stages = lines[1 : next(i for i, line in enumerate(lines) if line.startswith("consumer:"))]
    assert len(stages) == 5 and all(" inline " in line for line in stages), stages
    assert out == [b["id"].tolist() for b in ds.iter(num_threads=2)]


def test_a_function_that_keeps_its_arguments_sees_each_sample():
    # A chunk's calls share one argument tuple only while nothing else holds it.
    kept = []

    def keep(*args):
        kept.append(args)
        return args[0]

    for threads in (0, 1):
        kept.clear()
        out = [s["id"] for s in sluice.range(50).map(keep).iter(num_threads=threads)]
        assert out == list(range(50))
        assert [a[0]["id"] for a in kept] == list(range(50))


def test_num_threads_zero_early_break_and_errors():
    def boom(s):
        if s["id"] == 37:
            raise RuntimeError("bad sample")
        return s

    it = iter(sluice.range(10**9).map(lambda s: s).batch(4).iter(num_threads=0))
    next(it)
    it.close()
    with pytest.raises(sluice.PipelineError, match="sample 37") as e:
        list(sluice.range(100).map(boom).iter(num_threads=0))
    assert isinstance(e.value.__cause__, RuntimeError)
